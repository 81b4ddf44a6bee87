//! Message sizes: parsing `4K`/`1M`/`1G`, printing them the way the seed tables do, and the sweep.

/// The smallest size a benchmark moves: the tables count 4-byte elements.
pub const MIN_SIZE: u64 = 4;
/// The largest: 4 GiB keeps one buffer per peer addressable on every provider we know.
pub const MAX_SIZE: u64 = 4 << 30;

/// Parses a power-of-two byte count with an optional K, M or G suffix (binary multiples).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, multiplier) = match trimmed.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&trimmed[..trimmed.len() - 1], 1u64 << 10),
        Some('M') => (&trimmed[..trimmed.len() - 1], 1 << 20),
        Some('G') => (&trimmed[..trimmed.len() - 1], 1 << 30),
        _ => (trimmed, 1),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size; use a power of two such as 4, 64K, 1M or 1G"))?;
    let bytes = value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large; the largest size is {}", format_size(MAX_SIZE)))?;
    if !bytes.is_power_of_two() {
        return Err(format!("`{text}` is not a power of two; use one such as 4K, 64K, 1M or 1G"));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&bytes) {
        return Err(format!(
            "`{text}` is out of range; sizes run from {} to {}",
            format_size(MIN_SIZE),
            format_size(MAX_SIZE)
        ));
    }
    Ok(bytes)
}

/// `4096` → `4K`, as in the seed tables.
pub fn format_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Every power of two from `min` to `max` inclusive.
pub fn sweep(min: u64, max: u64) -> Vec<u64> {
    std::iter::successors(Some(min), |s| s.checked_mul(2)).take_while(|s| *s <= max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_limits() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("64"), Ok(64));
        assert!(parse_size("3K").unwrap_err().contains("power of two"));
        assert!(parse_size("2").unwrap_err().contains("out of range"));
        assert!(parse_size("8G").unwrap_err().contains("out of range"));
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
    }

    #[test]
    fn formatting_matches_the_seed() {
        assert_eq!(format_size(256 << 10), "256K");
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(512), "512");
        assert_eq!(sweep(4096, 32768), vec![4096, 8192, 16384, 32768]);
    }
}
