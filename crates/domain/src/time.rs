//! Calendar time from Unix time, without a date crate: run ids and listings only need UTC
//! dates, and this is the one place that computes them.

/// A moment in UTC, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// Year, e.g. 2026.
    pub year: i64,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of the month, 1..=31.
    pub day: u32,
    /// Hour, 0..=23.
    pub hour: u32,
    /// Minute, 0..=59.
    pub minute: u32,
    /// Second, 0..=59.
    pub second: u32,
}

impl UtcTime {
    /// The UTC calendar time of `secs` seconds after the Unix epoch.
    pub fn from_unix(secs: u64) -> Self {
        let (year, month, day) = civil_from_days((secs / 86_400) as i64);
        let rem = secs % 86_400;
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: ((rem % 3600) / 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

impl std::fmt::Display for UtcTime {
    /// `2026-11-22 04:30:12`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days from 1970-01-01 to a date (the inverse of `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A length of time as people write it on a command line: a number and a unit, `90s`,
/// `30m`, `12h`, `7d`, `2w`. Returns seconds.
pub fn parse_duration(text: &str) -> Result<f64, crate::DomainError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let wrong = || crate::DomainError::NotADuration {
        text: text.to_owned(),
    };
    let number: f64 = number.parse().map_err(|_| wrong())?;
    let unit = match unit.trim() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        _ => return Err(wrong()),
    };
    if !number.is_finite() || number < 0.0 {
        return Err(wrong());
    }
    Ok(number * unit)
}

/// A moment as people write it for `--since`: a date `2026-11-01` (midnight UTC), a UTC time
/// `2026-11-01T12:30:00Z` (or with a space), or a duration back from `now` (`7d`: the last
/// seven days). Returns seconds since the Unix epoch.
pub fn parse_since(text: &str, now: f64) -> Result<f64, crate::DomainError> {
    let text = text.trim();
    if let Ok(ago) = parse_duration(text) {
        return Ok((now - ago).max(0.0));
    }
    let wrong = || crate::DomainError::NotAMoment {
        text: text.to_owned(),
    };
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, Some(time.trim_end_matches('Z'))),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-');
    let mut next = || parts.next().and_then(|p| p.parse::<i64>().ok());
    let (Some(year), Some(month), Some(day)) = (next(), next(), next()) else {
        return Err(wrong());
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(wrong());
    }
    let mut secs = days_from_civil(year, month as u32, day as u32) * 86_400;
    if let Some(time) = time {
        let fields: Vec<Option<i64>> = time.split(':').map(|f| f.parse().ok()).collect();
        let (h, m, s) = match fields.as_slice() {
            [Some(h), Some(m)] => (*h, *m, 0),
            [Some(h), Some(m), Some(s)] => (*h, *m, *s),
            _ => return Err(wrong()),
        };
        if !(0..24).contains(&h) || !(0..60).contains(&m) || !(0..61).contains(&s) {
            return Err(wrong());
        }
        secs += h * 3600 + m * 60 + s;
    }
    Ok(secs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(
            UtcTime::from_unix(1_763_785_812).to_string(),
            "2025-11-22 04:30:12"
        );
    }

    #[test]
    fn durations_and_dates_for_the_command_line() {
        assert_eq!(parse_duration("90s"), Ok(90.0));
        assert_eq!(parse_duration("7d"), Ok(604_800.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        for bad in ["", "7", "d", "7y", "-1d", "x7d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_since("2025-11-22", 0.0), Ok(1_763_769_600.0));
        assert_eq!(
            parse_since("2025-11-22T04:30:12Z", 0.0),
            Ok(1_763_785_812.0)
        );
        assert_eq!(parse_since("2025-11-22 04:30", 0.0), Ok(1_763_785_800.0));
        assert_eq!(parse_since("1d", 100_000.0), Ok(13_600.0));
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        for bad in ["2025-13-01", "2025-11", "yesterday", "2025-11-22T25:00"] {
            assert!(parse_since(bad, 0.0).is_err(), "{bad}");
        }
    }
}
