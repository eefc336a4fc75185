//! The web share of a 90in2 send (`clarion-bench run --web-percent`): the
//! mock web push service readied for its browsers, and the ideal
//! time of a send whose platforms each have their own ceiling.

use anyhow::Result;

use crate::audience::AudienceShape;
use crate::mocks::{FaultConfig, WebPushMock};
use crate::seed::{SeedPlan, connect, seed_web_subscriptions};

/// Readies the benchmark's mock web push service for a web share: it
/// knows every seeded browser, opens one push in `decrypt_one_in`, answers
/// the dead ones 410, and `shape`'s browsers are subscribed on it (written
/// now: its port is new each run).
pub async fn prepare_mock(
    mock: &WebPushMock,
    database_url: &str,
    shape: AudienceShape,
    devices: u64,
    apps: u32,
    decrypt_one_in: u32,
) -> Result<()> {
    mock.accept_seeded()?;
    mock.decrypt_one_in(decrypt_one_in);
    mock.state.faults.set(FaultConfig {
        dead_prefixes: vec![crate::audience::DEAD_PREFIX.into()],
        ..FaultConfig::default()
    });
    let plan = SeedPlan {
        devices,
        shape,
        fresh: false,
        apps,
        receipts: false,
    };
    let browsers = seed_web_subscriptions(&connect(database_url).await?, &plan, &mock.origin).await?;
    println!(
        "{browsers} browsers subscribed on the mock web push service {}",
        mock.origin
    );
    Ok(())
}

/// The least time in which pushes at each platform's ceiling reach
/// `share` of the whole audience: `platforms` holds each platform's
/// reachable devices and ceiling rate, all pushing at once, a platform
/// done when its devices are. With every platform's share in proportion
/// to its rate this is `share × total / Σ rates`, the two-platform
/// formula; a platform slower than its share (web, which encrypts every
/// message) makes it longer.
pub fn ideal_seconds(platforms: &[(u64, f64)], share: f64) -> Option<f64> {
    let total: u64 = platforms.iter().map(|(devices, _)| devices).sum();
    let target = share * total as f64;
    let reached = |t: f64| -> f64 {
        platforms
            .iter()
            .map(|(devices, rate)| (*devices as f64).min(rate * t))
            .sum()
    };
    // Each platform's finishing time is where the curve bends: between
    // two of them it is a line, solved exactly.
    let mut bends: Vec<f64> = platforms
        .iter()
        .filter(|(_, rate)| *rate > 0.0)
        .map(|(devices, rate)| *devices as f64 / rate)
        .collect();
    bends.sort_by(f64::total_cmp);
    let mut from = 0.0;
    for to in bends {
        if reached(to) >= target {
            let rate: f64 = platforms
                .iter()
                .filter(|(devices, rate)| *rate > 0.0 && *devices as f64 / rate > from)
                .map(|(_, rate)| rate)
                .sum();
            return (rate > 0.0).then(|| from + (target - reached(from)) / rate);
        }
        from = to;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::ideal_seconds;

    #[test]
    fn the_ideal_is_the_pooled_formula_when_shares_match_rates_and_longer_when_not() {
        // 50/50 at equal rates: 0.9 × 200 / 200 = 0.9 s.
        let even = ideal_seconds(&[(100, 100.0), (100, 100.0)], 0.9).expect("reached");
        assert!((even - 0.9).abs() < 1e-9, "{even}");
        // Web at a tenth of the rate with 40% of the audience: iOS and
        // Android (30 each at 100/s) are done at 0.3 s with 60 + 3 pushed;
        // the last 27 of the 90 come at 10/s: 0.3 + 2.7 = 3.0 s.
        let web = ideal_seconds(&[(30, 100.0), (30, 100.0), (40, 10.0)], 0.9).expect("reached");
        assert!((web - 3.0).abs() < 1e-9, "{web}");
        // A platform with devices and no rate never lets 100% be reached.
        assert_eq!(ideal_seconds(&[(10, 10.0), (10, 0.0)], 1.0), None);
    }
}
