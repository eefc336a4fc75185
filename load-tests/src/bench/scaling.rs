//! How a send's cost grows with its audience: reads the 90in2 results of
//! one commit and one machine (several runs of a size are summarised by
//! their median run by t90),
//! writes a table of t90, efficiency and CPU per push by audience as JSON,
//! prints it as the README's Markdown table, and plots t90 and CPU per push
//! against the audience.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use plotters::style::RGBColor;
use serde::Serialize;
use serde_json::Value;

use super::plot::{Series, format_devices, scaling as plot_scaling};
use super::write_json;

#[derive(Debug, Clone, clap::Args)]
pub struct ScalingArgs {
    /// The `clarion-bench run` results to summarise (JSON files).
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Name of the summary files under `--out-dir`.
    #[arg(long, default_value = "scaling")]
    pub name: String,
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
}

/// One audience size: its median run, and the t90 range of all its runs.
#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    pub audience: u64,
    pub runs: usize,
    pub t90_s: f64,
    pub t90_min_s: f64,
    pub t90_max_s: f64,
    pub ceiling_per_s: f64,
    pub efficiency: f64,
    pub end_to_end_ratio: f64,
    pub dispatcher_ratio: Option<f64>,
    /// `None` for a send over within the first 5 s.
    pub first_5s_ratio: Option<f64>,
    pub dispatcher_cpu_us_per_push: f64,
    pub ceiling_cpu_us_per_push: f64,
    pub mocks_cpu_us_per_push: f64,
    pub coordinator_cpu_us_per_device: f64,
}

#[derive(Debug, Serialize)]
pub struct Scaling {
    pub sizes: Vec<SizeRow>,
    pub git_commits: Vec<String>,
    pub machine: Value,
}

pub fn run(args: ScalingArgs) -> Result<Scaling> {
    let mut by_audience: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    let mut commits = Vec::new();
    let mut machine = Value::Null;
    for path in &args.results {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let result: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let audience = result["audience"]
            .as_u64()
            .with_context(|| format!("{} has no audience: not a 90in2 result", path.display()))?;
        let commit = result["git_commit"]
            .as_str()
            .with_context(|| format!("{} names no commit", path.display()))?;
        if !commits.iter().any(|seen| seen == commit) {
            commits.push(commit.to_owned());
        }
        if !machine.is_null() && result["machine"] != machine {
            bail!(
                "{} was measured on another machine than the results before it",
                path.display()
            );
        }
        machine = result["machine"].clone();
        by_audience.entry(audience).or_default().push(result);
    }
    if commits.len() > 1 {
        bail!(
            "the results come from several commits ({}): compare one commit's",
            commits.join(", ")
        );
    }
    let sizes = by_audience
        .iter()
        .map(|(audience, runs)| summarise(*audience, runs))
        .collect::<Result<Vec<_>>>()?;
    let report = Scaling {
        sizes,
        git_commits: commits,
        machine,
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join(format!("{}.json", args.name)), &report)?;
    plot(&report, &args.out_dir.join(format!("{}.svg", args.name)))?;
    print!("{}", markdown(&report.sizes));
    Ok(report)
}

/// The row of one size: the figures of its median run by t90 (the lower
/// middle one of an even count), so that a row's figures come from one run
/// and agree with each other, with the t90 range of all its runs.
fn summarise(audience: u64, runs: &[Value]) -> Result<SizeRow> {
    let t90 = |run: &Value| run["t90_s"].as_f64();
    let mut timed: Vec<(f64, &Value)> = runs
        .iter()
        .map(|run| {
            t90(run)
                .map(|t90| (t90, run))
                .with_context(|| format!("a {audience}-device result has no t90"))
        })
        .collect::<Result<_>>()?;
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (t90_s, median_run) = *timed
        .get((timed.len().max(1) - 1) / 2)
        .with_context(|| format!("no {audience}-device results"))?;
    let field = |name: &str| -> Result<f64> {
        median_run[name]
            .as_f64()
            .with_context(|| format!("no `{name}` in the median {audience}-device result"))
    };
    Ok(SizeRow {
        audience,
        runs: runs.len(),
        t90_s,
        t90_min_s: timed.first().map_or(t90_s, |(t90, _)| *t90),
        t90_max_s: timed.last().map_or(t90_s, |(t90, _)| *t90),
        ceiling_per_s: field("ceiling_per_s")?,
        efficiency: field("efficiency")?,
        end_to_end_ratio: field("end_to_end_ratio")?,
        dispatcher_ratio: field("dispatcher_ratio").ok(),
        first_5s_ratio: field("first_5s_ratio").ok(),
        dispatcher_cpu_us_per_push: field("dispatcher_cpu_us_per_push")?,
        ceiling_cpu_us_per_push: field("ceiling_cpu_us_per_push")?,
        mocks_cpu_us_per_push: field("mocks_cpu_us_per_push")?,
        coordinator_cpu_us_per_device: field("coordinator_cpu_us_per_device")?,
    })
}

fn plot(report: &Scaling, path: &std::path::Path) -> Result<()> {
    let points = |value: Figure| -> Vec<(f64, f64)> {
        report
            .sizes
            .iter()
            .map(|row| (row.audience as f64, value(row)))
            .collect()
    };
    let commit = report.git_commits.first().map_or("", String::as_str);
    plot_scaling(
        path,
        &format!("90in2 by audience size ({commit})"),
        &points(|row| row.t90_s),
        &CPU_SERIES.map(|(label, color, value)| Series {
            label,
            color,
            points: points(value),
        }),
    )
}

/// A figure of a row, as the plot reads it.
type Figure = fn(&SizeRow) -> f64;

/// The right panel's lines: label, colour and the figure each plots.
const CPU_SERIES: [(&str, RGBColor, Figure); 4] = [
    ("dispatchers, per push", RGBColor(31, 119, 180), |row| {
        row.dispatcher_cpu_us_per_push
    }),
    ("ceiling client, per push", RGBColor(44, 160, 44), |row| {
        row.ceiling_cpu_us_per_push
    }),
    ("mocks, per push", RGBColor(255, 127, 14), |row| {
        row.mocks_cpu_us_per_push
    }),
    ("coordinator, per device", RGBColor(214, 39, 40), |row| {
        row.coordinator_cpu_us_per_device
    }),
];

/// The README's table: one row per audience size.
fn markdown(sizes: &[SizeRow]) -> String {
    let mut table = String::from(
        "| devices | runs | t90 | ceiling | efficiency | end to end | dispatchers alone | first 5 s | \
         dispatchers µs/push | ceiling client µs/push | mocks µs/push | coordinator µs/device |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in sizes {
        let t90 = if row.runs > 1 {
            format!("{:.1} s ({:.1}–{:.1})", row.t90_s, row.t90_min_s, row.t90_max_s)
        } else {
            format!("{:.1} s", row.t90_s)
        };
        let ratio = |ratio: Option<f64>| ratio.map_or("–".to_owned(), |ratio| format!("{ratio:.2}×"));
        let (dispatchers, first_5s) = (ratio(row.dispatcher_ratio), ratio(row.first_5s_ratio));
        table.push_str(&format!(
            "| {} | {} | {t90} | {:.0}k/s | {:.2} | {:.2}× | {dispatchers} | {first_5s} | {:.1} | {:.1} | {:.1} | {:.2} |\n",
            format_devices(row.audience as f64),
            row.runs,
            row.ceiling_per_s / 1000.0,
            row.efficiency,
            row.end_to_end_ratio,
            row.dispatcher_cpu_us_per_push,
            row.ceiling_cpu_us_per_push,
            row.mocks_cpu_us_per_push,
            row.coordinator_cpu_us_per_device,
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::summarise;

    #[test]
    fn runs_of_one_size_are_summarised_by_their_median() {
        let run = |t90: f64, efficiency: f64| {
            json!({
                "audience": 2_000_000, "t90_s": t90, "ceiling_per_s": 90_000.0,
                "efficiency": efficiency, "end_to_end_ratio": 0.7, "first_5s_ratio": 0.9,
                "dispatcher_cpu_us_per_push": 12.0, "ceiling_cpu_us_per_push": 10.0,
                "mocks_cpu_us_per_push": 11.0, "coordinator_cpu_us_per_device": 1.0,
            })
        };
        let row = summarise(2_000_000, &[run(30.0, 0.6), run(20.0, 0.9), run(25.0, 0.7)]).unwrap();
        assert_eq!(
            (row.runs, row.t90_s, row.t90_min_s, row.t90_max_s),
            (3, 25.0, 20.0, 30.0)
        );
        assert_eq!(row.efficiency, 0.7);
        assert_eq!(
            row.dispatcher_ratio, None,
            "no dispatcher-alone phase in these runs"
        );
        let missing = summarise(100, &[json!({"audience": 100})]);
        assert!(missing.is_err(), "a result without t90 is refused");
    }
}
