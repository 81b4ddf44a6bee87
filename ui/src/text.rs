//! Formatting shared by the panels: fixed-width cells, short durations and rates. Every helper turns a
//! missing or non-finite value into [`MISSING`], so no panel can print a number nobody measured.

use std::time::Duration;

/// What a cell shows when nothing was measured behind it.
pub(super) const MISSING: &str = "-";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// Display width of `text`; everything this crate writes is one column per `char`.
pub(crate) fn width(text: &str) -> usize {
    text.chars().count()
}

/// Cuts `text` to `max` columns, marking the cut with an ellipsis.
pub(super) fn truncate(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// `text` cut or padded to exactly `columns`.
pub(crate) fn cell(text: &str, columns: usize, align: Align) -> String {
    let text = truncate(text, columns);
    match align {
        Align::Left => format!("{text:<columns$}"),
        Align::Right => format!("{text:>columns$}"),
    }
}

/// Past this a value is written in scientific notation: only a broken sender reports it, and a
/// hundred digits would push every other cell off the screen.
const HUGE: f64 = 1e12;

/// A measured value with `decimals` digits, or [`MISSING`].
pub(crate) fn number(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(value) if value.is_finite() && value.abs() < HUGE => format!("{value:.decimals$}"),
        Some(value) if value.is_finite() => format!("{value:.2e}"),
        _ => MISSING.to_string(),
    }
}

/// `m:ss`, or `h:mm:ss` past an hour: elapsed time and ETA.
pub(super) fn clock(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

/// How long ago: tenths of a second while that still matters for a heartbeat, then coarser.
pub(crate) fn ago(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs < 10 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if secs < 600 {
        format!("{secs}s")
    } else {
        clock(duration)
    }
}

/// Operations per second in at most six columns: `950`, `12.3k`, `1.25M`.
pub(super) fn rate(per_second: f64) -> String {
    if !per_second.is_finite() || per_second < 0.0 {
        return MISSING.to_string();
    }
    if per_second < 1e3 {
        format!("{per_second:.0}")
    } else if per_second < 1e6 {
        format!("{:.1}k", per_second / 1e3)
    } else if per_second < 1e9 {
        format!("{:.2}M", per_second / 1e6)
    } else {
        format!("{:.2}G", per_second / 1e9)
    }
}

/// A link or scale speed without trailing zeros: `100`, `12.5`.
pub(super) fn speed(gbps: f64) -> String {
    if gbps.fract() == 0.0 && gbps.abs() < HUGE {
        format!("{gbps:.0}")
    } else {
        number(Some(gbps), 1)
    }
}

pub(super) fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_cut_with_an_ellipsis_and_padded() {
        assert_eq!(cell("rdmap79s0-rdm", 6, Align::Left), "rdmap…");
        assert_eq!(cell("42", 5, Align::Right), "   42");
        assert_eq!(truncate("abc", 0), "");
    }

    #[test]
    fn missing_and_non_finite_values_are_dashes() {
        assert_eq!(number(None, 2), "-");
        assert_eq!(number(Some(f64::NAN), 2), "-");
        assert_eq!(number(Some(1.234), 1), "1.2");
        assert_eq!(rate(f64::INFINITY), "-");
        assert_eq!(number(Some(1e300), 1), "1.00e300");
    }

    #[test]
    fn durations_and_rates_stay_short() {
        assert_eq!(clock(Duration::from_secs(62)), "1:02");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
        assert_eq!(ago(Duration::from_millis(400)), "0.4s");
        assert_eq!(ago(Duration::from_secs(42)), "42s");
        assert_eq!(rate(950.0), "950");
        assert_eq!(rate(12_345.0), "12.3k");
        assert_eq!(rate(1_250_000.0), "1.25M");
        assert_eq!(speed(100.0), "100");
        assert_eq!(speed(12.5), "12.5");
    }
}
