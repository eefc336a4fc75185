//! Benchmarks run against real processes: each writes its figures as JSON
//! under `load-tests/results/`.

pub mod ceiling;
pub mod harvest;
pub mod mocks;
pub mod plot;
pub mod run;

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::seed::connect;

/// Creates `database` (owned by the connecting role) when missing and
/// applies Clarion's migrations to it.
pub async fn prepare_database(url: &str) -> Result<()> {
    let (server, name) = url
        .rsplit_once('/')
        .context("the database URL names no database")?;
    let name = name.split('?').next().unwrap_or(name);
    let admin = connect(&format!("{server}/postgres")).await?;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await?;
    }
    clarion_coordinator::migrations::run(url)
        .await
        .context("migrating the benchmark database")?;
    Ok(())
}

/// Writes `report` as pretty JSON to `path`, creating its directory.
pub fn write_json(path: &Path, report: &impl Serialize) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// The commit the benchmark ran on, when run from a git checkout.
pub fn git_commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
