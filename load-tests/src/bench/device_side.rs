//! The 90in2 benchmark's device side: a panel of the audience reports
//! receipts, as the phones of a real app do, and the benchmark records the
//! device-side t50 / t90 / t99 that the coordinator computes from them.
//!
//! The panel is one device in 256 (tokens ending in [`PANEL_SUFFIX`]): its
//! registrations say `receipts: true` and only its phones behind the mocks
//! post receipts. A panel keeps the receipts' own load (the storm issue's
//! subject) out of the send being measured, while its 90th percentile is
//! that of the whole audience within a fraction of a second (7,800 phones
//! at 2M devices). The phones start after the ceiling phase, so the ceiling
//! stays the bare transport's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::local_cluster::{APP_KEY, LocalCluster};
use crate::mocks::{ApnsMock, FcmMock, ReceiptsConfig};

/// Tokens ending in this are the reporting panel (1 in 256 of the
/// benchmark's hex-derived tokens).
pub const PANEL_SUFFIX: &str = "00";

/// How long after the send ends the benchmark waits for the panel's t90:
/// with the phones' default delays it comes ~15 s after the last push.
const PATIENCE: Duration = Duration::from_secs(120);

/// What the panel's phones reported, as the coordinator counts it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceSide {
    /// Audience devices whose registration reports receipts (the panel).
    pub reporting: u64,
    /// Of those, the devices that reported `received`.
    pub received: u64,
    /// Seconds from the send until 50 / 90 / 99% of the reporting devices
    /// received it (the slowest app's when there are several).
    pub t50_s: Option<f64>,
    pub t90_s: Option<f64>,
    pub t99_s: Option<f64>,
}

/// Marks the panel's registrations as reporting (and every other one as
/// not), then switches the phones behind both mocks on.
pub async fn start_panel(
    database_url: &str,
    cluster: &LocalCluster,
    apns: &ApnsMock,
    fcm: &FcmMock,
    web: Option<&crate::mocks::WebPushMock>,
) -> Result<()> {
    let client = crate::seed::connect(database_url).await?;
    // Only rows that change are written: on a seeded 10M audience this is
    // one scan and ~40k updates, not 10M new row versions.
    let marked = client
        .execute(
            "UPDATE registrations SET receipts = (right(token, 2) = $1) \
             WHERE receipts IS DISTINCT FROM (right(token, 2) = $1)",
            &[&PANEL_SUFFIX],
        )
        .await
        .context("marking the receipts panel")?;
    // Fresh statistics, so the receipts' audience check plans with the
    // panel's real size.
    client
        .batch_execute("ANALYZE registrations")
        .await
        .context("analysing registrations")?;
    println!("receipts panel: tokens ending in {PANEL_SUFFIX} report ({marked} registrations changed)");
    let config = ReceiptsConfig {
        panel_suffix: Some(PANEL_SUFFIX.to_owned()),
        ..ReceiptsConfig::new(format!("{}/api/v1/receipts", cluster.base), APP_KEY)
    };
    apns.state.start_phones(config.clone())?;
    if let Some(web) = web {
        web.state.start_phones(config.clone())?;
    }
    fcm.state.start_phones(config)?;
    Ok(())
}

/// Waits until every notification's device-side t90 is known (at most
/// two minutes) and returns the statuses then, with the panel's figures.
pub async fn wait_for_panel(cluster: &LocalCluster, ids: &[String]) -> Result<(Vec<Value>, DeviceSide)> {
    let started = Instant::now();
    loop {
        let mut statuses = Vec::with_capacity(ids.len());
        for id in ids {
            statuses.push(cluster.get(&format!("/api/v1/notifications/{id}")).await?);
        }
        let known = statuses.iter().all(|s| !s["device"]["t90_ms"].is_null());
        if known || started.elapsed() >= PATIENCE {
            let side = device_side(&statuses);
            return Ok((statuses, side));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The panel's figures over one or more notifications' statuses.
fn device_side(statuses: &[Value]) -> DeviceSide {
    let count = |field: &str| {
        statuses
            .iter()
            .map(|s| s["device"][field].as_u64().unwrap_or(0))
            .sum()
    };
    // The slowest app's figure; unknown when any app's is.
    let seconds = |field: &str| {
        statuses
            .iter()
            .map(|s| s["device"][field].as_u64().map(|ms| ms as f64 / 1000.0))
            .try_fold(0.0_f64, |slowest, t| t.map(|t| slowest.max(t)))
    };
    DeviceSide {
        reporting: count("reporting"),
        received: count("received"),
        t50_s: seconds("t50_ms"),
        t90_s: seconds("t90_ms"),
        t99_s: seconds("t99_ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn several_apps_give_the_slowest_figure_and_unknown_wins() {
        let a = json!({"device": {"reporting": 10, "received": 9, "t50_ms": 1000, "t90_ms": 4000, "t99_ms": null}});
        let b = json!({"device": {"reporting": 20, "received": 19, "t50_ms": 1500, "t90_ms": 3000, "t99_ms": 9000}});
        let side = device_side(&[a, b]);
        assert_eq!((side.reporting, side.received), (30, 28));
        assert_eq!(side.t50_s, Some(1.5));
        assert_eq!(side.t90_s, Some(4.0));
        assert_eq!(side.t99_s, None);
    }

    #[test]
    fn the_panel_is_about_one_device_in_256() {
        let shape = crate::audience::AudienceShape {
            web_percent: 0,
            ios_percent: 50,
            dead_percent: 0,
            layout: crate::audience::Layout::Single,
            locales: 0,
        };
        let panel = (0..100_000)
            .filter(|n| crate::audience::device(*n, shape).token.ends_with(PANEL_SUFFIX))
            .count();
        assert!((300..500).contains(&panel), "{panel} of 100,000");
    }
}
