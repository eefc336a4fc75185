//! What one load saw: the latency of every answer that succeeded in an HDR
//! histogram (and one a second, for the plot), every other answer by
//! status (503s apart: back-pressure is allowed and must show), and the
//! requests that got no answer (deadline, connection).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::{CreationError, Histogram};
use serde::Serialize;

/// Latencies are kept in microseconds, from 1 µs to this.
const HIGHEST_US: u64 = 60_000_000;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP answer with this status.
    Answered(u16),
    /// No answer within the request's deadline.
    TimedOut,
    /// The connection failed (refused, reset, closed mid-request).
    ConnectionFailed,
}

impl Outcome {
    /// 2xx, and 304 for a conditional read: what a client counts as served.
    pub fn succeeded(self) -> bool {
        matches!(self, Outcome::Answered(status) if (200..300).contains(&status) || status == 304)
    }
}

/// One second of a load, for the plot.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the benchmark's clock started (the second's middle).
    pub t_s: f64,
    /// Requests that succeeded in that second.
    pub per_s: f64,
    /// 99th percentile latency of those, in milliseconds.
    pub p99_ms: Option<f64>,
}

/// The figures of one load over one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadFigures {
    /// Requests that ended, one way or another.
    pub requests: u64,
    /// Of those, answered 2xx or 304.
    pub succeeded: u64,
    /// 304 answers (conditional reads with `If-None-Match`), among the succeeded.
    pub not_modified: u64,
    /// Seconds from the phase's start to its last answer.
    pub seconds: f64,
    /// Succeeded requests per second.
    pub per_s: f64,
    /// Items per second (receipts when a request carries several; else
    /// equal to `per_s`).
    pub items_per_s: f64,
    /// Latency of the succeeded requests, in milliseconds (from the time a
    /// request was due in an open loop, so a late start counts).
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// 503 answers (back-pressure: allowed, counted apart).
    pub status_503: u64,
    /// Other refusals and failures, by status code.
    pub errors_by_status: BTreeMap<String, u64>,
    /// Requests with no answer within their deadline.
    pub timeouts: u64,
    /// Requests whose connection failed.
    pub connection_errors: u64,
    pub timeline: Vec<Second>,
}

/// Collects one load's answers; shared by its connections.
pub struct Recorder {
    /// The benchmark's clock: the timeline's seconds count from it.
    origin: Instant,
    started: Instant,
    last: Instant,
    all: Histogram<u64>,
    /// An empty histogram of a second, cloned for each new second.
    blank_second: Histogram<u64>,
    seconds: Vec<(u64, Histogram<u64>)>,
    requests: u64,
    succeeded: u64,
    not_modified: u64,
    items: u64,
    by_status: BTreeMap<u16, u64>,
    timeouts: u64,
    connection_errors: u64,
}

impl Recorder {
    pub fn new(origin: Instant, started: Instant) -> Result<Self, CreationError> {
        Ok(Self {
            origin,
            started,
            last: started,
            all: histogram(3)?,
            // Two digits a second: 19 KiB each, not 150.
            blank_second: histogram(2)?,
            seconds: Vec::new(),
            requests: 0,
            succeeded: 0,
            not_modified: 0,
            items: 0,
            by_status: BTreeMap::new(),
            timeouts: 0,
            connection_errors: 0,
        })
    }

    /// One request that ended at `ended` after `latency`, carrying `items`.
    pub fn record(&mut self, ended: Instant, latency: Duration, outcome: Outcome, items: u64) {
        self.requests += 1;
        self.last = self.last.max(ended);
        match outcome {
            Outcome::Answered(status) if outcome.succeeded() => {
                self.succeeded += 1;
                self.items += items;
                self.not_modified += u64::from(status == 304);
                let us = (latency.as_micros() as u64).clamp(1, HIGHEST_US);
                // Clamped into the histogram's range: recording cannot fail.
                let _ = self.all.record(us);
                let second = ended.saturating_duration_since(self.started).as_secs() as usize;
                if self.seconds.len() <= second {
                    self.seconds.resize(second + 1, (0, self.blank_second.clone()));
                }
                let (count, latencies) = &mut self.seconds[second];
                *count += 1;
                let _ = latencies.record(us);
            }
            Outcome::Answered(status) => *self.by_status.entry(status).or_default() += 1,
            Outcome::TimedOut => self.timeouts += 1,
            Outcome::ConnectionFailed => self.connection_errors += 1,
        }
    }

    pub fn figures(&self) -> LoadFigures {
        let seconds = self.last.saturating_duration_since(self.started).as_secs_f64();
        let per = |n: u64| if seconds > 0.0 { n as f64 / seconds } else { 0.0 };
        let quantile =
            |h: &Histogram<u64>, q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
        let offset = self.started.saturating_duration_since(self.origin).as_secs_f64();
        let full_seconds = self
            .seconds
            .len()
            .saturating_sub(usize::from(seconds.fract() > 0.0));
        let timeline = self
            .seconds
            .iter()
            .enumerate()
            // The last, partial second would show a false drop in rate.
            .take(full_seconds.max(1))
            .map(|(i, (count, latencies))| Second {
                t_s: offset + i as f64 + 0.5,
                per_s: *count as f64,
                p99_ms: quantile(latencies, 0.99),
            })
            .collect();
        let mut errors_by_status = BTreeMap::new();
        let mut status_503 = 0;
        for (status, count) in &self.by_status {
            if *status == 503 {
                status_503 += count;
            } else {
                errors_by_status.insert(status.to_string(), *count);
            }
        }
        LoadFigures {
            requests: self.requests,
            succeeded: self.succeeded,
            not_modified: self.not_modified,
            seconds,
            per_s: per(self.succeeded),
            items_per_s: per(self.items),
            p50_ms: quantile(&self.all, 0.5),
            p90_ms: quantile(&self.all, 0.9),
            p99_ms: quantile(&self.all, 0.99),
            max_ms: (!self.all.is_empty()).then(|| self.all.max() as f64 / 1000.0),
            status_503,
            errors_by_status,
            timeouts: self.timeouts,
            connection_errors: self.connection_errors,
            timeline,
        }
    }
}

/// A latency histogram of 1 µs to a minute with `digits` significant digits.
fn histogram(digits: u8) -> Result<Histogram<u64>, CreationError> {
    Histogram::new_with_bounds(1, HIGHEST_US, digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_count_successes_503s_errors_and_latency_apart() {
        let origin = Instant::now();
        let started = origin + Duration::from_secs(5);
        let mut recorder = Recorder::new(origin, started).unwrap();
        let at = |ms: u64| started + Duration::from_millis(ms);
        // 100 answers in the first second, 1..=100 ms each, 50 receipts apiece.
        for ms in 1..=100 {
            recorder.record(at(ms * 9), Duration::from_millis(ms), Outcome::Answered(202), 50);
        }
        // The second second: one 304, two 503s, a 422, a timeout, a reset.
        recorder.record(at(1_100), Duration::from_millis(3), Outcome::Answered(304), 1);
        recorder.record(at(1_200), Duration::from_millis(1), Outcome::Answered(503), 50);
        recorder.record(at(1_300), Duration::from_millis(1), Outcome::Answered(503), 50);
        recorder.record(at(1_400), Duration::from_millis(1), Outcome::Answered(422), 50);
        recorder.record(at(1_500), Duration::from_secs(10), Outcome::TimedOut, 50);
        recorder.record(at(2_000), Duration::from_millis(1), Outcome::ConnectionFailed, 50);
        let figures = recorder.figures();
        assert_eq!(
            (figures.requests, figures.succeeded, figures.not_modified),
            (106, 101, 1)
        );
        assert_eq!(figures.seconds, 2.0);
        assert_eq!(figures.per_s, 50.5);
        assert_eq!(figures.items_per_s, (100.0 * 50.0 + 1.0) / 2.0);
        assert_eq!(figures.status_503, 2);
        assert_eq!(figures.errors_by_status, BTreeMap::from([("422".to_owned(), 1)]));
        assert_eq!((figures.timeouts, figures.connection_errors), (1, 1));
        let p50 = figures.p50_ms.expect("answers");
        let p99 = figures.p99_ms.expect("answers");
        assert!((49.0..=51.0).contains(&p50), "{p50}");
        assert!((98.0..=100.0).contains(&p99), "{p99}");
        // Two whole seconds, placed on the benchmark's clock.
        assert_eq!(figures.timeline.len(), 2);
        assert_eq!((figures.timeline[0].t_s, figures.timeline[0].per_s), (5.5, 100.0));
        assert_eq!((figures.timeline[1].t_s, figures.timeline[1].per_s), (6.5, 1.0));
    }

    #[test]
    fn an_idle_load_has_no_latency_and_no_rate() {
        let now = Instant::now();
        let figures = Recorder::new(now, now).unwrap().figures();
        assert_eq!((figures.requests, figures.per_s), (0, 0.0));
        assert_eq!(figures.p99_ms, None);
        assert!(figures.timeline.is_empty());
    }
}
