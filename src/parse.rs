//! The values the command line's flags take, parsed once for every command (the flags themselves are
//! declared under `cli/`). Durations: a number with a unit, `ms`, `s`, `m` or `h` (a fraction allowed:
//! `2.5s`, `0.5m`), or a bare number, which is seconds on every flag. Each flag keeps its own range; a
//! value outside it, or not a duration, is refused in one line that names the flag (clap adds it) and
//! the range.

use std::ops::RangeInclusive;
use std::time::Duration;

/// `text` as a duration: `100ms`, `1s`, `2.5s`, `5m`, `1h`, or a bare number of seconds (`2`, `0.5`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    let value: f64 = number.parse().ok()?;
    let seconds_per_unit = match unit {
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(value * seconds_per_unit).ok()
}

/// How a range reads in a message: `10ms`, `10s`, `20s`, `60s`.
fn shown(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

/// A duration flag from `min` to `max`; `what` names it in the message (`an interval`), `example` shows one.
pub fn duration(
    what: &'static str,
    min: Duration,
    max: Duration,
    example: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text: &str| match parse_duration(text) {
        Some(duration) if (min..=max).contains(&duration) => Ok(duration),
        _ => Err(format!("`{text}` is not {what}; use {} to {}, e.g. {example} (a bare number is seconds)", shown(min), shown(max))),
    }
}

/// A duration flag kept in whole seconds (`30`, `30s`, `2m`), within `range`.
pub fn seconds(range: RangeInclusive<u64>) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        let whole = parse_duration(text).filter(|d| d.subsec_nanos() == 0).map(|d| d.as_secs());
        match whole {
            Some(seconds) if range.contains(&seconds) => Ok(seconds),
            _ => Err(format!(
                "`{text}` is not a duration in {}..={} seconds; use whole seconds, e.g. {} or {}s (m and h too)",
                range.start(),
                range.end(),
                range.start().max(&1),
                range.start().max(&1)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_numbers_are_seconds() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("2.5s"), Some(Duration::from_millis(2500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        for bad in ["", "fast", "s", "-1s", "1d", "1.2.3s", ".", "1 s s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn each_flag_keeps_its_range_and_says_it() {
        let interval = duration("an interval", Duration::from_millis(10), Duration::from_secs(10), "100ms or 1s");
        assert_eq!(interval("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(interval("2"), Ok(Duration::from_secs(2)));
        let refused = interval("5ms").unwrap_err();
        assert!(refused.contains("`5ms` is not an interval; use 10ms to 10s"), "{refused}");
        assert!(interval("1h").is_err() && interval("fast").is_err());
        let timeout = seconds(1..=3600);
        assert_eq!(timeout("30"), Ok(30));
        assert_eq!(timeout("2m"), Ok(120));
        assert!(timeout("1500ms").is_err());
        assert!(timeout("0").unwrap_err().contains("1..=3600"));
        assert_eq!(seconds(0..=10)("0"), Ok(0));
    }
}
