//! `storm.json`: every load alone and during the send, the send's t90
//! without and with the storm, the storm's share of the CPU; and the
//! Markdown table the README quotes.

use serde::Serialize;
use serde_json::Value;

use super::cpu::{Cpu, PeakMemory};
use super::load::Load;
use super::recorder::LoadFigures;
use crate::bench::run::Machine;

#[derive(Debug, Serialize)]
pub struct StormReport {
    pub name: String,
    /// Devices seeded.
    pub devices: u64,
    /// Devices of the send's topic.
    pub send_audience: u64,
    /// Connections of each load.
    pub connections: usize,
    /// Seconds of each phase of a load alone.
    pub seconds_per_phase: u64,
    /// The send with nothing else running.
    pub send_alone: SendFigures,
    /// The same send while the pollers polled it (their own phase).
    pub send_with_pollers: Option<SendFigures>,
    /// t90 with the pollers over t90 alone, less one (the target: ≤ 2%).
    pub t90_growth_with_pollers: Option<f64>,
    /// The pollers during their send.
    pub during_pollers_send: Vec<LoadResult>,
    /// The same send while every storm load ran at its target rate.
    pub send_with_storm: Option<SendFigures>,
    /// t90 with the storm over t90 without, less one (0.05 = 5% slower).
    pub t90_growth: Option<f64>,
    /// The storm's share of the CPU during the send: what every process
    /// used during the send with the storm beyond what they used during
    /// the send alone, over what they used during the send with the storm.
    pub storm_cpu_share: Option<f64>,
    /// The load generator's own share of that CPU (it runs on the same box).
    pub generator_cpu_share: Option<f64>,
    /// The t90 growth the storm's CPU alone accounts for on cores the send
    /// saturates: the send keeps `1 − share` of the CPU, so it takes
    /// `1 / (1 − share)` as long ([`cpu_bound_growth`]). A measured
    /// growth above it is the send waiting on something besides CPU.
    pub cpu_bound_growth: Option<f64>,
    /// Each load alone: closed loop (pollers: their own rate), no send.
    pub alone: Vec<LoadResult>,
    /// Every load together, open loop at its target, during the send.
    pub during_send: Vec<LoadResult>,
    /// The coordinator's counter of status computations, when it has one.
    pub status_metric: Option<String>,
    pub machine: Machine,
    pub configuration: Value,
    pub git_commit: Option<String>,
}

/// One send of the storm's audience.
#[derive(Debug, Clone, Serialize)]
pub struct SendFigures {
    pub notification_id: String,
    pub audience: u64,
    /// Seconds from the send request until 50 / 90 / 99 / 100% of the
    /// audience were accepted by the mocks.
    pub t50_s: Option<f64>,
    pub t90_s: Option<f64>,
    pub t99_s: Option<f64>,
    pub t100_s: Option<f64>,
    /// CPU of every process from the send request to its completion.
    pub cpu: Cpu,
    /// Peak memory of the Clarion processes at the send's end.
    pub peak_memory: PeakMemory,
    /// Status computations the coordinator counted during the send.
    pub status_computations: Option<f64>,
}

/// One load in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    pub load: Load,
    /// `closed-loop` or `open-loop`.
    pub pace: &'static str,
    pub target_per_s: Option<f64>,
    /// Items a request carries (receipts a batch).
    pub items_per_request: u64,
    #[serde(flatten)]
    pub figures: LoadFigures,
    /// CPU of every process over the phase (alone phases only: during the
    /// send the loads share it, see the send's).
    pub cpu: Option<Cpu>,
    /// Status computations the coordinator counted over the phase, and per second.
    pub status_computations: Option<f64>,
    pub status_computations_per_s: Option<f64>,
}

/// t90 with the storm over t90 without, less one.
pub fn t90_growth(alone: &SendFigures, with_storm: &SendFigures) -> Option<f64> {
    let (alone, with_storm) = (alone.t90_s?, with_storm.t90_s?);
    (alone > 0.0).then(|| with_storm / alone - 1.0)
}

/// The CPU the storm added to the send, as a share of all the CPU used
/// during the send with the storm (never below zero).
pub fn storm_cpu_share(alone: &Cpu, with_storm: &Cpu) -> Option<f64> {
    let total = with_storm.total_s();
    (total > 0.0).then(|| ((total - alone.total_s()) / total).clamp(0.0, 1.0))
}

/// The t90 growth that taking `share` of saturated cores from the send
/// explains by itself: `share / (1 − share)` (a quarter of the CPU taken,
/// a third longer); none when the share is all of it.
pub fn cpu_bound_growth(share: f64) -> Option<f64> {
    (share < 1.0).then(|| share / (1.0 - share))
}

/// The README's table: each load alone and during the send, then the send.
pub fn markdown_table(report: &StormReport) -> String {
    let mut out = String::new();
    let audience = thousands(report.send_audience as f64);
    out.push_str(&format!(
        "| load | alone: rate | p99 | 503s | during a {audience}-device send: target | achieved | p99 | 503s | other errors |\n"
    ));
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for load in Load::ALL {
        let alone = report.alone.iter().find(|r| r.load == load);
        let during = report.during_send.iter().find(|r| r.load == load);
        if alone.is_none() && during.is_none() {
            continue;
        }
        let rate = |r: &LoadResult| format!("{}/s", thousands(r.figures.items_per_s));
        let p99 = |r: &LoadResult| {
            r.figures
                .p99_ms
                .map_or("–".to_owned(), |ms| format!("{ms:.1} ms"))
        };
        let dash = || "–".to_owned();
        let errors = |r: &LoadResult| {
            let f = &r.figures;
            f.errors_by_status.values().sum::<u64>() + f.timeouts + f.connection_errors
        };
        let status_503 = |r: &LoadResult| r.figures.status_503.to_string();
        let both_errors = alone.map_or(0, errors) + during.map_or(0, errors);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {both_errors} |\n",
            load.label(),
            alone.map_or_else(dash, rate),
            alone.map_or_else(dash, p99),
            alone.map_or_else(dash, status_503),
            during.and_then(|r| r.target_per_s).map_or_else(dash, |t| format!(
                "{}/s",
                thousands(t * during.map_or(1, |r| r.items_per_request) as f64)
            )),
            during.map_or_else(dash, rate),
            during.map_or_else(dash, p99),
            during.map_or_else(dash, status_503),
        ));
    }
    let seconds = |t: Option<f64>| t.map_or("–".to_owned(), |t| format!("{t:.1} s"));
    out.push_str(&format!(
        "\nSend of {audience} devices: t90 {} alone, {} with the storm",
        seconds(report.send_alone.t90_s),
        seconds(report.send_with_storm.as_ref().and_then(|s| s.t90_s)),
    ));
    if let Some(growth) = report.t90_growth {
        out.push_str(&format!(" ({:+.1}%)", growth * 100.0));
    }
    if let Some(share) = report.storm_cpu_share {
        out.push_str(&format!(
            "; the storm's share of the CPU during the send {:.0}% (the load generator's {:.0}%)",
            share * 100.0,
            report.generator_cpu_share.unwrap_or(0.0) * 100.0
        ));
    }
    if let Some(growth) = report.cpu_bound_growth {
        out.push_str(&format!(
            "; taking that share of saturated cores slows a send by {:+.0}%",
            growth * 100.0
        ));
    }
    out.push_str(".\n");
    if let Some(with_pollers) = &report.send_with_pollers {
        out.push_str(&format!(
            "With the pollers alone during it: t90 {}",
            seconds(with_pollers.t90_s)
        ));
        if let Some(growth) = report.t90_growth_with_pollers {
            out.push_str(&format!(" ({:+.1}%)", growth * 100.0));
        }
        out.push_str(".\n");
    }
    if let Some(pollers) = report.alone.iter().find(|r| r.load == Load::Pollers)
        && let Some(per_s) = pollers.status_computations_per_s
    {
        out.push_str(&format!(
            "Pollers alone: {:.1} status computations a second in PostgreSQL ({}).\n",
            per_s,
            report.status_metric.as_deref().unwrap_or("")
        ));
    }
    out
}

/// `12,345`: a figure as the README writes it (rounded to a whole number).
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn send(t90_s: Option<f64>, cpu_s: f64) -> SendFigures {
        SendFigures {
            notification_id: "n".into(),
            audience: 1_000_000,
            t50_s: None,
            t90_s,
            t99_s: None,
            t100_s: None,
            cpu: Cpu {
                dispatchers_s: cpu_s,
                ..Cpu::default()
            },
            peak_memory: PeakMemory::default(),
            status_computations: None,
        }
    }

    fn result(load: Load, target_per_s: Option<f64>, items_per_s: f64, p99_ms: f64) -> LoadResult {
        LoadResult {
            load,
            pace: if target_per_s.is_some() {
                "open-loop"
            } else {
                "closed-loop"
            },
            target_per_s,
            items_per_request: if load == Load::ReceiptsBatched { 50 } else { 1 },
            figures: LoadFigures {
                items_per_s,
                p99_ms: Some(p99_ms),
                status_503: 3,
                errors_by_status: BTreeMap::from([("500".to_owned(), 2)]),
                timeouts: 1,
                ..LoadFigures::default()
            },
            cpu: None,
            status_computations: None,
            status_computations_per_s: None,
        }
    }

    #[test]
    fn growth_and_cpu_share_compare_the_two_sends() {
        let (alone, storm) = (send(Some(10.0), 30.0), send(Some(11.5), 40.0));
        assert!((t90_growth(&alone, &storm).unwrap() - 0.15).abs() < 1e-9);
        assert_eq!(storm_cpu_share(&alone.cpu, &storm.cpu), Some(0.25));
        // A storm send that used less CPU (noise) is a share of 0, not negative.
        assert_eq!(storm_cpu_share(&storm.cpu, &alone.cpu), Some(0.0));
        assert_eq!(t90_growth(&send(None, 1.0), &storm), None);
        assert_eq!(storm_cpu_share(&alone.cpu, &Cpu::default()), None);
        assert_eq!(cpu_bound_growth(0.25).map(|g| (g * 3.0).round()), Some(1.0));
        assert_eq!(cpu_bound_growth(0.0), Some(0.0));
        assert_eq!(cpu_bound_growth(1.0), None);
    }

    #[test]
    fn the_table_has_a_row_per_load_measured_and_the_send_line() {
        let report = StormReport {
            name: "storm".into(),
            devices: 2_000_000,
            send_audience: 1_000_000,
            connections: 64,
            seconds_per_phase: 10,
            send_alone: send(Some(10.0), 30.0),
            send_with_pollers: Some(send(Some(10.1), 31.0)),
            t90_growth_with_pollers: Some(0.01),
            during_pollers_send: Vec::new(),
            send_with_storm: Some(send(Some(11.0), 40.0)),
            t90_growth: Some(0.1),
            storm_cpu_share: Some(0.25),
            generator_cpu_share: Some(0.08),
            cpu_bound_growth: Some(1.0 / 3.0),
            alone: vec![
                result(Load::RegistrationWrites, None, 21_000.0, 40.0),
                result(Load::ReceiptsBatched, None, 52_500.0, 30.0),
            ],
            during_send: vec![result(Load::ReceiptsBatched, Some(400.0), 19_990.0, 12.5)],
            status_metric: None,
            machine: crate::bench::run::machine(),
            configuration: Value::Null,
            git_commit: None,
        };
        let table = markdown_table(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("during a 1,000,000-device send"), "{table}");
        assert_eq!(
            lines[2],
            "| registration writes (`PUT`, 2 topics) | 21,000/s | 40.0 ms | 3 | – | – | – | – | 3 |"
        );
        assert_eq!(
            lines[3],
            "| receipts, batches | 52,500/s | 30.0 ms | 3 | 20,000/s | 19,990/s | 12.5 ms | 3 | 6 |"
        );
        assert_eq!(lines.len(), 7, "{table}");
        assert!(
            lines[5].contains("t90 10.0 s alone, 11.0 s with the storm (+10.0%)"),
            "{table}"
        );
        assert!(
            lines[5].contains(
                "CPU during the send 25% (the load generator's 8%); taking that share of saturated cores slows a send by +33%."
            ),
            "{table}"
        );
        assert_eq!(lines[6], "With the pollers alone during it: t90 10.1 s (+1.0%).");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_286.0), "1,286");
        assert_eq!(thousands(86_227.2), "86,227");
        assert_eq!(thousands(20_000_000.0), "20,000,000");
    }
}
