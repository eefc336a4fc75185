//! `clarion-bench api-check -- COMMAND…`: a coordinator process on a
//! database and an AMQP namespace of its own, started the way the tests
//! start one, and a command run against it (`./scripts/test` runs
//! schemathesis this way). The command finds the API's base URL in
//! `CLARION_API_BASE` and a key with every scope in `CLARION_API_KEY`; the
//! database and the namespace are dropped afterwards, whatever the outcome.
//! The coordinator serves two apps beside `default` (an apps file written
//! beside its log, [`APPS_FILE`]), so the run covers `app` as an
//! installation with several apps answers it.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clarion_runtime::testing::{TestDatabase, TestNamespace};

use crate::local_cluster::{LocalCluster, LocalClusterConfig};

/// The one key the coordinator accepts (`admin` implies every scope).
pub const KEY: &str = "api-check-key";

/// The apps file: one app with APNs credentials only, one with FCM only.
/// The coordinator checks the file's form, not the credentials (those are
/// the dispatchers'), so the paths need not exist.
pub const APPS_FILE: &str = r#"[apps.puzzles]
apns_topic = "com.example.puzzles"
apns_key_file = "/nonexistent/puzzles/AuthKey.p8"
apns_key_id = "PUZZLES123"
apns_team_id = "TEAM123456"

[apps.sport]
fcm_credentials_file = "/nonexistent/sport/service-account.json"
"#;

#[derive(Debug, clap::Args)]
pub struct ApiCheckArgs {
    /// Where the coordinator's log goes.
    #[arg(long, default_value = "target/api-check-logs")]
    pub log_dir: PathBuf,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the command; fails when it fails.
pub async fn run(args: ApiCheckArgs) -> Result<()> {
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    std::fs::create_dir_all(&args.log_dir).with_context(|| format!("creating {}", args.log_dir.display()))?;
    let apps_file = args.log_dir.join("apps.toml");
    std::fs::write(&apps_file, APPS_FILE).with_context(|| format!("writing {}", apps_file.display()))?;
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 0,
        coordinator_env: vec![
            ("CLARION_API_KEYS".into(), format!("{KEY}=admin")),
            ("CLARION_APPS_FILE".into(), apps_file.display().to_string()),
        ],
        harvester_env: Vec::new(),
        dispatcher_env: Vec::new(),
        log_dir: args.log_dir.clone(),
    };
    // A fresh database holds no earlier run's sends to cancel (and this
    // cluster knows only `KEY`, not the newsroom key the cancel uses).
    let mut cluster = LocalCluster::start(&config).await?;
    let (program, rest) = args.command.split_first().context("no command given")?;
    let mut command = std::process::Command::new(program);
    command
        .args(rest)
        .env("CLARION_API_BASE", &cluster.base)
        .env("CLARION_API_KEY", KEY);
    // The command runs for minutes: wait for it off the async threads.
    let status = tokio::task::spawn_blocking(move || command.status())
        .await
        .context("waiting for the command")?
        .with_context(|| format!("starting {program}"));
    let crashed = cluster.coordinator.ensure_running().err();
    cluster.stop();
    if let Some(err) = crashed {
        bail!("the coordinator died during the run: {err:#}");
    }
    let status = status?;
    if !status.success() {
        bail!("{program} failed ({status})");
    }
    Ok(())
}
