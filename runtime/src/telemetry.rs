//! Log set-up: `tracing` to stdout as text or JSON lines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt;

use crate::settings::{LogFormat, LogSettings};

/// Installs the global subscriber. Call once, at the start of `main`.
pub fn init_logging(settings: &LogSettings) -> Result<(), String> {
    let filter = EnvFilter::try_new(&settings.filter)
        .map_err(|err| format!("invalid log filter {:?}: {err}", settings.filter))?;
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_ansi(std::io::stdout().is_terminal());
    let result = match settings.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|err| format!("cannot install the logger: {err}"))
}
