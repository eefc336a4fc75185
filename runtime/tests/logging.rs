//! The global logger, installed as the services install it: it must let
//! their log lines through whether or not spans are exported. (One test per
//! binary: the global subscriber can be installed once per process.)

use clarion_runtime::settings::{LogFormat, LogSettings};
use tracing::level_filters::LevelFilter;

#[test]
fn logs_are_on_at_the_configured_level_without_an_otlp_endpoint() {
    let settings = LogSettings {
        format: LogFormat::Text,
        filter: "info".into(),
    };
    clarion_runtime::telemetry::init_logging(&settings).expect("the logger installs");
    assert_eq!(LevelFilter::current(), LevelFilter::INFO);
    assert!(tracing::enabled!(tracing::Level::INFO), "info lines are written");
    assert!(
        !tracing::enabled!(tracing::Level::DEBUG),
        "debug lines are filtered out"
    );
}
