//! The latency histogram as it travels: log-linear buckets, and an interval's counts as sparse (bucket,
//! count) pairs, which is what a rank's sampler sends and what rank 0 merges. The hot path records into
//! the probe's fixed array of atomics of these buckets (`efatop_experiments::probe::AtomicHistogram`).
//!
//! Buckets: values below 32 ns exactly; above, 16 buckets per power of two (a bucket is at most 1/16 = 6%
//! wide), up to 2^40 ns (18 minutes).


const EXACT: u64 = 32;
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
const MAX_EXPONENT: u32 = 40;
pub const BUCKETS: usize = (EXACT + (MAX_EXPONENT as u64 - 5) * SUB) as usize;

/// The bucket of a value in nanoseconds.
pub fn bucket_of(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let exponent = ns.ilog2().min(MAX_EXPONENT - 1);
    let mantissa = if ns >> exponent > 1 { SUB - 1 } else { (ns >> (exponent - SUB_BITS)) & (SUB - 1) };
    (EXACT + u64::from(exponent - 5) * SUB + mantissa) as usize
}

/// The smallest value (ns) that falls in `bucket`.
pub fn bucket_floor(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT {
        return bucket;
    }
    let exponent = (bucket - EXACT) / SUB + 5;
    let mantissa = (bucket - EXACT) % SUB;
    (1 << exponent) + (mantissa << (exponent - u64::from(SUB_BITS)))
}

/// A representative value (ns) of `bucket`: its midpoint.
pub fn bucket_value(bucket: usize) -> f64 {
    let low = bucket_floor(bucket) as f64;
    let high = bucket_floor(bucket + 1) as f64;
    if bucket < EXACT as usize { low } else { f64::midpoint(low, high) }
}

/// An interval's non-empty buckets: up to [`INLINE_BUCKETS`] held in place, more on the heap.
pub type Buckets = smallvec::SmallVec<[(u16, u32); INLINE_BUCKETS]>;

/// Buckets an interval holds without an allocation of its own: a steady channel's latencies fall in a few
/// neighbouring buckets (16 a power of two).
pub const INLINE_BUCKETS: usize = 6;

/// The non-empty buckets of one interval, ascending by bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IntervalHistogram {
    pub buckets: Buckets,
}

impl IntervalHistogram {
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, c)| u64::from(*c)).sum()
    }

    /// The value (µs) below which `quantile` of the recorded values fall; `None` when empty.
    pub fn quantile_us(&self, quantile: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in &self.buckets {
            seen += u64::from(*count);
            if seen >= rank {
                return Some(bucket_value(usize::from(*bucket)) / 1000.0);
            }
        }
        self.max_us()
    }

    pub fn max_us(&self) -> Option<f64> {
        self.buckets.last().map(|(bucket, _)| bucket_value(usize::from(*bucket)) / 1000.0)
    }

    /// Adds `other`'s counts (rank 0 merges channels and intervals this way).
    pub fn merge(&mut self, other: &IntervalHistogram) {
        let mut merged = Buckets::with_capacity(self.buckets.len() + other.buckets.len());
        let (mut i, mut j) = (0, 0);
        while i < self.buckets.len() || j < other.buckets.len() {
            match (self.buckets.get(i), other.buckets.get(j)) {
                (Some(&(x, cx)), Some(&(y, cy))) if x == y => {
                    merged.push((x, cx.saturating_add(cy)));
                    i += 1;
                    j += 1;
                }
                (Some(&mine), Some(&(y, _))) if mine.0 < y => {
                    merged.push(mine);
                    i += 1;
                }
                (_, Some(&theirs)) => {
                    merged.push(theirs);
                    j += 1;
                }
                (Some(&mine), None) => {
                    merged.push(mine);
                    i += 1;
                }
                (None, None) => break,
            }
        }
        self.buckets = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_within_six_percent() {
        let mut previous = 0;
        for ns in (0..5000u64).chain([1 << 20, (1 << 30) + 12345, 1 << 39]) {
            let bucket = bucket_of(ns);
            assert!(bucket >= previous || ns > 5000, "{ns}");
            previous = bucket;
            let floor = bucket_floor(bucket);
            assert!(floor <= ns, "{ns}: floor {floor}");
            assert!(bucket_floor(bucket + 1) > ns, "{ns}: next {}", bucket_floor(bucket + 1));
            assert!((bucket_value(bucket) - ns as f64).abs() <= ns as f64 / 16.0 + 1.0, "{ns}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    /// docs/design.md says so: the live histogram's buckets are the final tables' hdrhistogram's at one
    /// significant digit.
    #[test]
    fn buckets_are_hdrhistograms_at_one_significant_digit() {
        let hdr = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 1).expect("valid bounds");
        for ns in (0..5000u64).chain([1 << 20, (1 << 30) + 12345, (1 << 39) + 7]) {
            assert_eq!(bucket_floor(bucket_of(ns)), hdr.lowest_equivalent(ns), "{ns}");
        }
    }

    #[test]
    fn quantiles_of_an_interval() {
        // 100 values, 1..=100 µs, one each.
        let mut buckets = Buckets::new();
        for us in 1..=100u64 {
            let bucket = bucket_of(us * 1000) as u16;
            match buckets.last_mut() {
                Some((last, count)) if *last == bucket => *count += 1,
                _ => buckets.push((bucket, 1)),
            }
        }
        let interval = IntervalHistogram { buckets };
        assert_eq!(interval.count(), 100);
        let p50 = interval.quantile_us(0.5).expect("p50");
        let p99 = interval.quantile_us(0.99).expect("p99");
        assert!((p50 - 50.0).abs() < 50.0 / 16.0 + 0.01, "{p50}");
        assert!((p99 - 99.0).abs() < 99.0 / 16.0 + 0.01, "{p99}");
    }

    #[test]
    fn merging_adds_counts() {
        let mut a = IntervalHistogram { buckets: smallvec::smallvec![(1, 2), (40, 1)] };
        let b = IntervalHistogram { buckets: smallvec::smallvec![(1, 3), (7, 1), (50, 4)] };
        a.merge(&b);
        assert_eq!(a.buckets.as_slice(), &[(1, 5), (7, 1), (40, 1), (50, 4)]);
        assert_eq!(IntervalHistogram::default().quantile_us(0.5), None);
    }
}
