//! The keys file (`CLARION_API_KEYS_FILE`), such as a mounted Kubernetes
//! Secret: read at start (a bad file stops the start), then polled, and
//! the keys replaced whenever its content changes.
//!
//! Polling the content rather than watching for file events also catches
//! the symlink swap by which Kubernetes updates a mounted Secret. A changed
//! file that cannot be read or parsed keeps the previous keys in force and
//! logs an error (once per change).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::{error, info};

use super::{ApiKeys, KeySet};
use crate::metrics;

/// Reads and parses the keys file; returns its keys and its text.
pub fn load(path: &Path) -> Result<(KeySet, String), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read the API keys file {}: {err}", path.display()))?;
    let keys = KeySet::from_toml(&text, None)
        .map_err(|err| format!("the API keys file {}: {err}", path.display()))?;
    Ok((keys, text))
}

/// Re-reads `path` every `every` and puts its keys in force when its
/// content changed from `text` (what was read last). Runs until aborted.
pub fn watch(path: PathBuf, keys: ApiKeys, mut text: String, every: Duration) -> tokio::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut unreadable = false;
        loop {
            ticks.tick().await;
            let reading = path.clone();
            let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(reading))
                .await
                .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
            let now = match read {
                Ok(now) => now,
                Err(err) => {
                    if !unreadable {
                        error!(path = %path.display(), error = %err, "cannot read the API keys file; the keys read before stay in force");
                        count("unreadable");
                    }
                    unreadable = true;
                    continue;
                }
            };
            unreadable = false;
            if now == text {
                continue;
            }
            text = now;
            match KeySet::from_toml(&text, Some(&keys.current())) {
                Ok(new_keys) => {
                    info!(path = %path.display(), keys = new_keys.len(), "API keys file changed; new keys in force");
                    keys.replace(new_keys);
                    count("reloaded");
                }
                Err(err) => {
                    error!(path = %path.display(), error = %err, "the API keys file changed but is not valid; the keys read before stay in force");
                    count("invalid");
                }
            }
        }
    })
}

fn count(outcome: &'static str) {
    metrics::API_KEYS_RELOADS.with([outcome]).increment(1);
}
