//! The values the command line's flags take, parsed once for every command (the flags themselves are
//! declared under `cli/`): whole numbers within a range, sizes, addresses to serve or listen on, files to
//! write, and durations. Durations: a number with a unit, `ms`, `s`, `m` or `h` (a fraction allowed:
//! `2.5s`, `0.5m`), or a bare number, which is seconds on every flag. Each flag keeps its own range; a
//! value outside it, or not a duration, is refused in one line that names the flag (clap adds it) and
//! the range.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Duration;

use efatop_proto::sizes;

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

/// `--serve`: `IP:PORT`, or a bare port on 127.0.0.1.
pub fn parse_serve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("`{text}` is not an address to serve on; use IP:PORT (e.g. 127.0.0.1:0, 0.0.0.0:7420) or a port"))
}

/// `--prometheus`: an IP address and port to listen on.
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| format!("`{text}` is not an address to listen on; use IP:PORT, e.g. 127.0.0.1:9400 or 0.0.0.0:9400"))
}

/// A whole-number flag within `range`. Read as a signed number, so that `--iters -5` is refused as out of
/// range, naming the flag and the range, rather than as a stray `-5` or "invalid digit".
pub fn whole_number<T>(range: impl std::ops::RangeBounds<i64>) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: TryFrom<i64> + Clone + Send + Sync + 'static,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    use clap::builder::TypedValueParser as _;
    clap::value_parser!(i64).range(range).try_map(T::try_from)
}

pub fn parse_size_arg(text: &str) -> Result<u64, String> {
    sizes::parse_size(text)
}

/// `--serve` and `--prometheus` (on a run or the monitor) on one port of one address: the second could not
/// listen. Port 0 picks a free port for each.
pub fn check_listeners(serve: Option<SocketAddr>, prometheus: Option<SocketAddr>) -> Result<(), String> {
    let (Some(serve), Some(prometheus)) = (serve, prometheus) else { return Ok(()) };
    let same_address = serve.ip() == prometheus.ip() || serve.ip().is_unspecified() || prometheus.ip().is_unspecified();
    if serve.port() != 0 && serve.port() == prometheus.port() && same_address {
        return Err(format!(
            "--serve {serve} and --prometheus {prometheus} would listen on one port; give each its own (or port 0 for --serve)"
        ));
    }
    Ok(())
}

/// A file `flag` will create: its folder must exist (a folder named on the command line is not made), and
/// it must not be a folder itself.
pub fn check_writable_file(flag: &str, path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{flag} {}: is a directory; name a file in it", path.display()));
    }
    // A link (or a FIFO, a device) is refused here, before anything runs, and again where the file is
    // written (a link planted in between is replaced, never followed).
    efatop_files::check_output_path(path).map_err(|err| format!("{flag}: {err}"))?;
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => {
            Err(format!("{flag} {}: there is no directory {} to write it in", path.display(), dir.display()))
        }
        _ => Ok(()),
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
