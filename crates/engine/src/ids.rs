//! Run ids that sort by start time and are safe as directory names, and the wall clock the
//! runlog's `ts` and every `--since` are measured on.

use fabric_domain::{RunId, UtcTime};
use std::time::{SystemTime, UNIX_EPOCH};

/// A new id: `YYYYMMDD-HHMMSS-mmm-xxxxxxxx` in UTC, where the last part is random.
///
/// Readable in a directory listing, sorted by time to the millisecond, and unique across
/// processes through the random tail (taken from a UUIDv7's random bits).
pub fn new_run_id() -> RunId {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let t = UtcTime::from_unix(now.as_secs());
    let random = uuid::Uuid::now_v7().simple().to_string();
    let tail = &random[random.len() - 8..];
    let text = format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{:03}-{tail}",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        now.subsec_millis()
    );
    // Invariant: the format above only produces ASCII digits, `-` and lowercase hex, all of
    // which RunId accepts, so parsing cannot fail.
    #[allow(clippy::expect_used)]
    RunId::parse(&text).expect("generated run ids are always valid")
}

/// Now, in seconds since the Unix epoch. A clock before 1970 is not a state anything can act
/// on; 0 keeps every caller's arithmetic valid.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
