//! Run ids that sort by start time and are safe as directory names.

use fabric_domain::RunId;
use std::time::{SystemTime, UNIX_EPOCH};

/// A new id: `YYYYMMDD-HHMMSS-mmm-xxxxxxxx` in UTC, where the last part is random.
///
/// Readable in a directory listing, sorted by time to the millisecond, and unique across
/// processes through the random tail (taken from a UUIDv7's random bits).
pub fn new_run_id() -> RunId {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let random = uuid::Uuid::now_v7().simple().to_string();
    let tail = &random[random.len() - 8..];
    let text = format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}-{:03}-{tail}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        now.subsec_millis()
    );
    // Invariant: the format above only produces ASCII digits, `-` and lowercase hex, all of
    // which RunId accepts, so parsing cannot fail.
    #[allow(clippy::expect_used)]
    RunId::parse(&text).expect("generated run ids are always valid")
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn ids_sort_by_time_and_are_unique() {
        let a = new_run_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_run_id();
        assert!(a < b, "{a} < {b}");
        assert_ne!(new_run_id(), new_run_id());
        assert_eq!(a.as_str().len(), "20261122-101010-123-abcdef12".len());
    }
}
