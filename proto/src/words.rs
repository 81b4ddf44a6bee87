//! English for counts and names in messages: `1 segment`, `2 segments`; `a write run`, `an alltoall run`.

/// `n` and the noun, plural unless `n` is 1: `plural(1, "segment")` is `1 segment`, `plural(3, "batch")`
/// is `3 batches`.
pub fn plural(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    if n == "1" {
        format!("1 {noun}")
    } else if ["s", "x", "ch", "sh"].iter().any(|end| noun.ends_with(end)) {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// The indefinite article for `word` as written: `an` before a vowel letter (`an alltoall`, `an ipc`),
/// else `a` (`a write`, `a sweep`).
pub fn article(word: &str) -> &'static str {
    let first = word.trim_start_matches(|c: char| !c.is_alphanumeric()).chars().next();
    if first.is_some_and(|c| "aeiouAEIOU".contains(c)) { "an" } else { "a" }
}

/// The longest a name read from a node (a device, a DMI product name, a path) is shown.
pub const NAME_MAX: usize = 256;
/// The longest a sentence made of such names is shown.
pub const MESSAGE_MAX: usize = 4096;

/// `text` as it may be printed to a terminal, a log or a file: every control character (C0, DEL, C1,
/// which can move a cursor, retitle a terminal or clear a screen) and every invisible formatting one
/// (bidirectional overrides and isolates, zero-width characters, which can make text read other than it
/// is) written as an escape (`\x1b`, `\u{202e}`), and at most `max` characters kept, the rest counted
/// (`... (+9999744 bytes)`). A tab stays (it is spacing); a newline does not (one item, one line).
/// Escaping twice gives the same text as once.
pub fn printable(text: &str, max: usize) -> String {
    use std::fmt::Write as _;
    let mut shown = String::with_capacity(text.len().min(max) + 16);
    for (kept, (at, c)) in text.char_indices().enumerate() {
        if kept >= max {
            let _ = write!(shown, "... (+{} bytes)", text.len() - at);
            return shown;
        }
        if !escaped(c) {
            shown.push(c);
        } else if u32::from(c) < 0x100 {
            let _ = write!(shown, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(shown, "\\u{{{:x}}}", u32::from(c));
        }
    }
    shown
}

/// [`printable`], keeping `text` itself when it is printable already (no copy).
pub fn into_printable(text: String, max: usize) -> String {
    if text.len() <= max && !text.chars().any(escaped) { text } else { printable(&text, max) }
}

/// A character [`printable`] writes as an escape: a control character but the tab, or an invisible
/// formatting one.
fn escaped(c: char) -> bool {
    let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}');
    (c.is_control() && c != '\t') || invisible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_invisible_characters_are_escaped_and_long_text_cut() {
        assert_eq!(printable("p5.48xlarge", NAME_MAX), "p5.48xlarge");
        assert_eq!(printable("\u{1b}]0;owned\u{7}p5\u{1b}[2J\n", NAME_MAX), "\\x1b]0;owned\\x07p5\\x1b[2J\\x0a");
        assert_eq!(printable("a\u{9b}b\u{202e}c\u{7f}", NAME_MAX), "a\\x9bb\\u{202e}c\\x7f");
        assert_eq!(printable("GPU \u{2192} NIC\t1 \u{b5}s", NAME_MAX), "GPU \u{2192} NIC\t1 \u{b5}s");
        let long = "x".repeat(10_000_000);
        let shown = printable(&long, NAME_MAX);
        assert_eq!(shown, format!("{}... (+{} bytes)", "x".repeat(NAME_MAX), 10_000_000 - NAME_MAX));
        let once = printable("\u{1b}[31mred\u{1b}[0m", NAME_MAX);
        assert_eq!(printable(&once, NAME_MAX), once, "escaping again changes nothing");
        assert_eq!(printable("\u{e9}t\u{e9}", 2), "\u{e9}t... (+2 bytes)", "cut on a character, counting bytes");
        for text in ["p5.48xlarge", "\u{1b}[2J", "\u{e9}t\u{e9}", &"y".repeat(300)] {
            assert_eq!(into_printable(text.to_string(), NAME_MAX), printable(text, NAME_MAX), "{text:?}");
        }
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1_u64, "segment"), "1 segment");
        assert_eq!(plural(0_usize, "segment"), "0 segments");
        assert_eq!(plural(2_u32, "retransmit"), "2 retransmits");
        assert_eq!(plural(3_i64, "batch"), "3 batches");
        assert_eq!(article("alltoall"), "an");
        assert_eq!(article("`ipc`"), "an");
        assert_eq!(article("write"), "a");
        assert_eq!(article(""), "a");
    }
}
