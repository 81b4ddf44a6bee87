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

#[cfg(test)]
mod tests {
    use super::*;

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
