//! The receipt-delay histogram: which bin a delay falls in, and what the
//! status and the curve read out of the bins (t-figures, cumulative
//! buckets, the share over time).
//!
//! Bins are 100 ms wide under 10 s (most phones), 1 s wide under an hour
//! and 1 min wide beyond, so a notification holds at most a few thousand
//! bins however long its tail; every bucket edge the status reports (30 s,
//! 60 s, … 300 s) and the 90in2 bar (120 s) is a bin edge, so the buckets
//! are exact.

/// The bucket edges of the status, in seconds.
pub const BUCKET_SECONDS: [u32; 7] = [30, 60, 90, 120, 180, 240, 300];

/// The 90in2 bar.
pub const TWO_MINUTES_MS: i64 = 120_000;

/// The lower edge, in milliseconds, of the bin holding `delay_ms`
/// (negative delays are not possible: times are clamped to the send).
pub fn bin_of(delay_ms: i64) -> i64 {
    let delay_ms = delay_ms.max(0);
    let width = bin_width(delay_ms);
    delay_ms - delay_ms % width
}

/// The width of the bin starting at (or holding) `ms`.
pub fn bin_width(ms: i64) -> i64 {
    if ms < 10_000 {
        100
    } else if ms < 3_600_000 {
        1_000
    } else {
        60_000
    }
}

/// Milliseconds from the send until `share` of `reporting` devices had
/// the event: the upper edge of the bin where the count reaches that share;
/// `None` while not reached (or when nobody reports). `bins` are
/// `(lower edge ms, count)` sorted by edge.
pub fn time_to_share(bins: &[(i64, u64)], reporting: u64, share: f64) -> Option<u64> {
    if reporting == 0 {
        return None;
    }
    let needed = ((share * reporting as f64).ceil() as u64).max(1);
    let mut seen = 0u64;
    bins.iter().find_map(|&(edge, count)| {
        seen += count;
        (seen >= needed).then(|| (edge + bin_width(edge)) as u64)
    })
}

/// How many had the event within each of [`BUCKET_SECONDS`] (cumulative).
pub fn buckets(bins: &[(i64, u64)]) -> [u64; 7] {
    BUCKET_SECONDS.map(|seconds| {
        let limit = i64::from(seconds) * 1000;
        bins.iter()
            .filter(|(edge, _)| *edge < limit)
            .map(|(_, count)| count)
            .sum()
    })
}

/// `[seconds since the send, share of reporting]` at the end of each bin
/// (cumulative, 0 to 1, four decimals); empty when nobody reports.
pub fn curve(bins: &[(i64, u64)], reporting: u64) -> Vec<[f64; 2]> {
    if reporting == 0 {
        return Vec::new();
    }
    let mut seen = 0u64;
    bins.iter()
        .map(|&(edge, count)| {
            seen += count;
            let share = (seen as f64 / reporting as f64).min(1.0);
            [
                (edge + bin_width(edge)) as f64 / 1000.0,
                (share * 10_000.0).round() / 10_000.0,
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_fine_early_and_coarse_late_and_bucket_edges_are_bin_edges() {
        assert_eq!(bin_of(-5), 0);
        assert_eq!(bin_of(1_234), 1_200);
        assert_eq!(bin_of(9_999), 9_900);
        assert_eq!(bin_of(10_000), 10_000);
        assert_eq!(bin_of(119_999), 119_000);
        assert_eq!(bin_of(3_600_000 + 61_000), 3_660_000);
        for seconds in BUCKET_SECONDS {
            let edge = i64::from(seconds) * 1000;
            assert_eq!(bin_of(edge), edge, "{seconds} s is a bin edge");
        }
    }

    #[test]
    fn t_figures_are_bin_ends_reached_by_that_share_of_the_reporting_audience() {
        let bins = [(1_200, 5), (2_000, 4), (150_000, 1)];
        assert_eq!(time_to_share(&bins, 10, 0.5), Some(1_300));
        assert_eq!(time_to_share(&bins, 10, 0.9), Some(2_100));
        assert_eq!(time_to_share(&bins, 10, 0.99), Some(151_000));
        assert_eq!(time_to_share(&bins, 20, 0.9), None);
        assert_eq!(time_to_share(&bins, 0, 0.5), None);
    }

    #[test]
    fn buckets_are_cumulative_and_exclusive_of_their_edge() {
        let bins = [(29_000, 1), (30_000, 2), (119_000, 3), (120_000, 4), (400_000, 5)];
        assert_eq!(buckets(&bins), [1, 3, 3, 6, 10, 10, 10]);
    }

    #[test]
    fn the_curve_is_cumulative_and_never_above_one() {
        assert_eq!(curve(&[(0, 2), (100, 2)], 4), vec![[0.1, 0.5], [0.2, 1.0]]);
        assert_eq!(curve(&[(0, 8)], 4), vec![[0.1, 1.0]]);
        assert!(curve(&[(0, 1)], 0).is_empty());
    }
}
