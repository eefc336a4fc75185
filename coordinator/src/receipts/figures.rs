//! The device-side figures of a notification, as the status shows them
//! (`"device": {...}`), and the received / opened curves.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::GenericClient;
use utoipa::ToSchema;
use uuid::Uuid;

use super::bins::{self, BUCKET_SECONDS, TWO_MINUTES_MS};
use super::store::{self, Aggregates};
use crate::store::StoreError;

/// What the phones reported: receipts from the reporting audience (the
/// audience devices whose registration says `receipts: true`), measured
/// from the send (the firing time of a scheduled send). Device-side, as
/// opposed to the provider-side figures beside it (what Apple / Google
/// accepted).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DeviceFigures {
    /// Audience devices whose registration says `receipts: true`, counted
    /// once shortly after the send (0 until then).
    pub reporting: u64,
    /// Reporting devices that said they received it (an open counts as a
    /// receipt too).
    pub received: u64,
    /// Reporting devices that said they opened it.
    pub opened: u64,
    /// `received` in percent of `reporting` (two decimals, at most 100).
    pub received_percent: f64,
    /// `opened` in percent of `reporting` (two decimals, at most 100).
    pub opened_percent: f64,
    /// Milliseconds from the send until half of the reporting audience had
    /// it (null until reached).
    pub t50_ms: Option<u64>,
    pub t90_ms: Option<u64>,
    pub t99_ms: Option<u64>,
    /// Reporting devices that had it within 30, 60, 90, 120, 180, 240 and
    /// 300 seconds of the send (cumulative).
    #[schema(value_type = BTreeMap<String, u64>, example = json!({"30": 812, "60": 905, "90": 930, "120": 944, "180": 951, "240": 955, "300": 958}))]
    pub buckets: BTreeMap<String, u64>,
    /// Device-side 90in2: 90% of the reporting audience said they received
    /// it within two minutes of the send (counting receipts that arrived by
    /// then). Null until two minutes after the send (and when nobody
    /// reports), then fixed: later receipts move the counts and t-figures,
    /// never this.
    pub ninety_in_two: Option<bool>,
}

/// The reporting audience the figures are over: 0 until the settler has
/// counted it (shares and times of an audience not yet known would be
/// shares of the receipts themselves: 100% at once), then the count, never
/// smaller than those who reported (devices that registered with receipts
/// after the count may report too).
fn reporting_of(found: &Aggregates) -> u64 {
    found.reporting.map_or(0, |counted| counted.max(found.received))
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    ((part.min(whole) as f64 * 10_000.0 / whole as f64).round() / 100.0).min(100.0)
}

/// The verdict the aggregates give at `now`: none before two minutes after
/// the send or when nobody reports; the stored one once stored.
pub fn verdict(found: &Aggregates, sent_at: DateTime<Utc>, now: DateTime<Utc>) -> Option<bool> {
    if found.ninety_in_two.is_some() {
        return found.ninety_in_two;
    }
    let reporting = found.reporting.filter(|n| *n > 0)?;
    if (now - sent_at).num_milliseconds() < TWO_MINUTES_MS {
        return None;
    }
    Some(found.received_in_two * 10 >= reporting * 9)
}

impl DeviceFigures {
    pub fn of(found: &Aggregates, sent_at: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        let reporting = reporting_of(found);
        let at = |share| bins::time_to_share(&found.received_bins, reporting, share);
        let within = bins::buckets(&found.received_bins);
        Self {
            reporting,
            received: found.received,
            opened: found.opened,
            received_percent: percent(found.received, reporting),
            opened_percent: percent(found.opened, reporting),
            t50_ms: at(0.5),
            t90_ms: at(0.9),
            t99_ms: at(0.99),
            buckets: BUCKET_SECONDS
                .iter()
                .zip(within)
                .map(|(seconds, n)| (seconds.to_string(), n))
                .collect(),
            ninety_in_two: verdict(found, sent_at, now),
        }
    }
}

/// The device figures of notification `id` sent at `sent_at`.
pub async fn device_figures(
    client: &impl GenericClient,
    id: Uuid,
    sent_at: DateTime<Utc>,
) -> Result<DeviceFigures, StoreError> {
    let found = store::aggregates(client, id).await?;
    Ok(DeviceFigures::of(&found, sent_at, Utc::now()))
}

/// The received and opened curves (`[[seconds, share of reporting]…]`).
pub async fn device_curves(
    client: &impl GenericClient,
    id: Uuid,
) -> Result<(Vec<[f64; 2]>, Vec<[f64; 2]>), StoreError> {
    let found = store::aggregates(client, id).await?;
    let reporting = reporting_of(&found);
    Ok((
        bins::curve(&found.received_bins, reporting),
        bins::curve(&found.opened_bins, reporting),
    ))
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn found() -> Aggregates {
        Aggregates {
            reporting: Some(10),
            ninety_in_two: None,
            received: 10,
            opened: 3,
            received_in_two: 9,
            received_bins: vec![(1_000, 9), (200_000, 1)],
            opened_bins: vec![(5_000, 3)],
        }
    }

    #[test]
    fn figures_are_over_the_reporting_audience() {
        let now = Utc::now();
        let figures = DeviceFigures::of(&found(), now - Duration::seconds(300), now);
        assert_eq!(figures.received_percent, 100.0);
        assert_eq!(figures.opened_percent, 30.0);
        assert_eq!(figures.t50_ms, Some(1_100));
        assert_eq!(figures.t90_ms, Some(1_100));
        assert_eq!(figures.t99_ms, Some(201_000));
        assert_eq!(figures.buckets["120"], 9);
        assert_eq!(figures.buckets["300"], 10);
        assert_eq!(figures.ninety_in_two, Some(true));
    }

    #[test]
    fn the_verdict_waits_two_minutes_then_is_the_stored_one() {
        let now = Utc::now();
        assert_eq!(verdict(&found(), now - Duration::seconds(60), now), None);
        let mut short = found();
        short.received_in_two = 8;
        assert_eq!(verdict(&short, now - Duration::seconds(121), now), Some(false));
        short.ninety_in_two = Some(true);
        assert_eq!(verdict(&short, now - Duration::seconds(121), now), Some(true));
        let nobody = Aggregates::default();
        assert_eq!(verdict(&nobody, now - Duration::seconds(600), now), None);
    }

    #[test]
    fn more_reports_than_counted_never_exceed_one_hundred_percent() {
        let mut more = found();
        more.reporting = Some(5);
        let figures = DeviceFigures::of(&more, Utc::now(), Utc::now());
        assert_eq!(figures.reporting, 10);
        assert_eq!(figures.received_percent, 100.0);
    }

    #[test]
    fn before_the_reporting_audience_is_counted_no_share_or_time_is_given() {
        let mut uncounted = found();
        uncounted.reporting = None;
        let figures = DeviceFigures::of(&uncounted, Utc::now(), Utc::now());
        assert_eq!(figures.reporting, 0);
        assert_eq!(figures.received, 10);
        assert_eq!(figures.received_percent, 0.0);
        assert_eq!(
            (figures.t50_ms, figures.t90_ms, figures.t99_ms),
            (None, None, None)
        );
        assert_eq!(figures.ninety_in_two, None);
    }
}
