//! How a builder says "too much, wait": the model endpoint is overloaded, which is not the
//! build's fault and must not spend one of its retries (`crate::Error::Backpressure`; the rail
//! then holds every node's next build: `crate::ledger::limits`).
//!
//! * The `http` builder: a `429 Too Many Requests` (with `Retry-After`, or [`DEFAULT_WAIT`]
//!   without), or a `503 Service Unavailable` that carries `Retry-After` (one without is an
//!   outage like any other: a failed build, retried with backoff).
//! * The `command` builder: exit code [`EXIT_BACKPRESSURE`] (75, `EX_TEMPFAIL` of sysexits.h),
//!   with a line `retry-after: SECONDS` on stderr (or [`DEFAULT_WAIT`] without).

use std::time::{Duration, SystemTime};

use crate::error::Error;

/// The command builder's exit code for "overloaded, ask again later".
pub const EXIT_BACKPRESSURE: i32 = 75;

/// The wait when the builder says it is overloaded without saying for how long.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// A `Retry-After` value: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), as a wait from
/// `now` (a date in the past is no wait). `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Seconds beyond u64 are still "a very long time": the rail caps every hold anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::from(at.with_timezone(&chrono::Utc));
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait a command builder's stderr names (its last `retry-after: SECONDS` line).
pub fn wait_from_stderr(stderr: &str) -> Option<Duration> {
    stderr.lines().rev().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if !key.trim().eq_ignore_ascii_case("retry-after") {
            return None;
        }
        let secs: f64 = value.trim().parse().ok()?;
        Duration::try_from_secs_f64(secs).ok()
    })
}

/// The error a builder returns for it.
pub fn backpressure(retry_after: Option<Duration>, message: String) -> Error {
    Error::Backpressure {
        retry_after: retry_after.unwrap_or(DEFAULT_WAIT),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37Z
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date already passed is no wait"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert!(parse_retry_after("99999999999999999999999", now).is_some());
    }

    #[test]
    fn a_commands_wait_is_its_last_retry_after_line() {
        assert_eq!(
            wait_from_stderr("model busy\nRetry-After: 3\nretry-after: 7.5\n"),
            Some(Duration::from_secs_f64(7.5))
        );
        assert_eq!(wait_from_stderr("retry-after: soon"), None);
        assert_eq!(wait_from_stderr("retry-after: -1"), None);
        assert_eq!(wait_from_stderr("nothing to say"), None);
    }
}
