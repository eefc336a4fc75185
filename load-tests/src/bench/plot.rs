//! The benchmarks' plots as SVG: the delivery curve (share of the reachable
//! audience accepted by the mocks against seconds since the send request,
//! with the 90% line and the two-minute line of the 90in2 bar), and the
//! accepted rate against a quota.

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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw)?;
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw)?;
    root.present().map_err(draw)?;
    Ok(())
}

fn draw(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {err}")
}
