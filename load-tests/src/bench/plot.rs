//! The benchmarks' plots as SVG: the delivery curve (share of the reachable
//! audience accepted by the mocks against seconds since the send request,
//! with the 90% line and the two-minute line of the 90in2 bar), the
//! accepted rate against a quota, how t90 and the CPU per push grow
//! with the audience, and the storm's loads (rate and p99 over time).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

pub fn delivery_curve(path: &Path, title: &str, curve: &[(f64, f64)], t90: Option<f64>) -> Result<()> {
    let last = curve.last().map_or(0.0, |(t, _)| *t);
    let x_max = (last * 1.1).max(125.0);
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..100.0)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the send request")
        .y_desc("% of reachable devices accepted")
        .draw()
        .map_err(draw)?;
    chart
        .draw_series(LineSeries::new(
            curve.iter().map(|(t, share)| (*t, share * 100.0)),
            BLUE.stroke_width(2),
        ))
        .map_err(draw)?
        .label(match t90 {
            Some(t90) => format!("delivered (t90 = {t90:.1} s)"),
            None => "delivered".to_owned(),
        })
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new([(0.0, 90.0), (x_max, 90.0)], RED.stroke_width(1)))
        .map_err(draw)?
        .label("90% of the audience")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .draw_series(LineSeries::new(
            [(120.0, 0.0), (120.0, 100.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(draw)?
        .label("two minutes")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(draw)?;
    Ok(())
}

/// Pushes accepted per second against seconds since the send, with the
/// quota's rate as a line and the moment a replica was killed.
pub fn rate_curve(
    path: &Path,
    title: &str,
    rates: &[(f64, f64)],
    quota_per_s: f64,
    kill_at: Option<f64>,
) -> Result<()> {
    let x_max = rates.last().map_or(1.0, |(t, _)| *t).max(1.0);
    let y_max = rates.iter().map(|(_, rate)| *rate).fold(quota_per_s, f64::max) * 1.15;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the send request")
        .y_desc("pushes accepted per second")
        .draw()
        .map_err(draw)?;
    chart
        .draw_series(LineSeries::new(rates.iter().copied(), BLUE.stroke_width(2)))
        .map_err(draw)?
        .label("accepted by the mock FCM, all replicas")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            [(0.0, quota_per_s), (x_max, quota_per_s)],
            RED.stroke_width(1),
        ))
        .map_err(draw)?
        .label("the project's quota")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    if let Some(at) = kill_at {
        chart
            .draw_series(LineSeries::new([(at, 0.0), (at, y_max)], BLACK.stroke_width(1)))
            .map_err(draw)?
            .label("one replica killed")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(draw)?;
    Ok(())
}

/// One line of the scaling plot: a label, a colour and its points
/// (audience, value).
pub struct Series<'a> {
    pub label: &'a str,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// Two panels against the audience (log scale): t90 with the two-minute
/// line on the left, CPU per push (or per device) on the right.
pub fn scaling(path: &Path, title: &str, t90: &[(f64, f64)], cpu: &[Series<'_>]) -> Result<()> {
    let audiences = t90.iter().map(|(audience, _)| *audience);
    let x_min = audiences.clone().fold(f64::INFINITY, f64::min).min(1e5) * 0.8;
    let x_max = audiences.fold(0.0, f64::max).max(1e6) * 1.25;
    let root = SVGBackend::new(path, (1200, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(draw)?;
    let (left, right) = root.split_horizontally(600);

    let t90_max = t90.iter().map(|(_, t)| *t).fold(120.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&left)
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..t90_max)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("devices in the audience")
        .y_desc("t90, seconds")
        .x_label_formatter(&|devices| format_devices(*devices))
        .draw()
        .map_err(draw)?;
    chart
        .draw_series(LineSeries::new(t90.iter().copied(), BLUE.stroke_width(2)))
        .map_err(draw)?
        .label("t90 (median where several runs)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(t90.iter().map(|point| Circle::new(*point, 4, BLUE.filled())))
        .map_err(draw)?;
    chart
        .draw_series(LineSeries::new(
            [(x_min, 120.0), (x_max, 120.0)],
            RED.stroke_width(1),
        ))
        .map_err(draw)?
        .label("two minutes")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;

    let cpu_max = cpu
        .iter()
        .flat_map(|series| series.points.iter().map(|(_, value)| *value))
        .fold(1.0, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(&right)
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..cpu_max)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("devices in the audience")
        .y_desc("CPU µs per push (coordinator: per device)")
        .x_label_formatter(&|devices| format_devices(*devices))
        .draw()
        .map_err(draw)?;
    for series in cpu {
        let color = series.color;
        chart
            .draw_series(LineSeries::new(
                series.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(draw)?
            .label(series.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(
                series
                    .points
                    .iter()
                    .map(|point| Circle::new(*point, 3, color.filled())),
            )
            .map_err(draw)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(draw)?;
    Ok(())
}

/// One load's line on the storm plot: (seconds on the benchmark's clock,
/// requests per second, p99 latency in milliseconds) per second.
pub struct Timeline<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// Two panels over the benchmark's clock, both on log scales: each load's
/// rate above, its p99 latency below, with `marks` (a moment and what
/// happened then, e.g. the sends) as vertical lines.
pub fn rate_and_latency(
    path: &Path,
    title: &str,
    lines: &[Timeline<'_>],
    marks: &[(f64, &str)],
) -> Result<()> {
    let points = || lines.iter().flat_map(|line| line.points.iter());
    let x_max = points().map(|(t, _, _)| *t).fold(1.0, f64::max) * 1.02;
    let rate_max = points().map(|(_, rate, _)| *rate).fold(10.0, f64::max) * 2.0;
    let p99_max = points().filter_map(|(_, _, p99)| *p99).fold(10.0, f64::max) * 2.0;
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(draw)?;
    let (top, bottom) = root.split_vertically(380);
    let panels = [
        (top, "requests (receipts) per second", 1.0..rate_max, true),
        (bottom, "p99 latency, ms", 0.1..p99_max, false),
    ];
    for (area, y_desc, y_range, rate) in panels {
        let mut chart = ChartBuilder::on(&area)
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, y_range.clone().log_scale())
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first phase")
            .y_desc(y_desc)
            .draw()
            .map_err(draw)?;
        for (i, line) in lines.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let series = line.points.iter().filter_map(|(t, rate_per_s, p99)| {
                let y = if rate { Some(*rate_per_s) } else { *p99 };
                y.filter(|y| *y >= y_range.start).map(|y| (*t, y))
            });
            chart
                .draw_series(LineSeries::new(series, color.stroke_width(2)))
                .map_err(draw)?
                .label(line.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        for (at, what) in marks {
            chart
                .draw_series(LineSeries::new(
                    [(*at, y_range.start), (*at, y_range.end)],
                    BLACK.stroke_width(1),
                ))
                .map_err(draw)?
                .label(*what)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        }
        if rate {
            legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// `100k`, `2M`: an audience as the README writes it.
pub fn format_devices(devices: f64) -> String {
    if devices >= 1e6 {
        format!("{}M", devices / 1e6)
    } else {
        format!("{}k", devices / 1e3)
    }
}

/// The legend box every plot draws, at `position`.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>, position: SeriesLabelPosition) -> Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw)?;
    Ok(())
}

fn draw(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {err}")
}
