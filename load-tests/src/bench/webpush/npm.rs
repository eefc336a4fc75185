//! The npm `web-push` library (the reference implementation) driving the
//! mock web push service: `load-tests/webpush-node/send.mjs`, installed
//! with `npm ci` when its `node_modules` is missing, run once per
//! concurrency with a plan on standard input; each run's one JSON line is
//! read back here.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::bench::ceiling::CEILING_NOTIFICATION_ID;
use crate::mocks::WebPushMock;

/// How long `npm ci` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a run may overrun its own deadline (start-up, the last
/// requests in flight) before it is killed.
const GRACE: Duration = Duration::from_secs(30);
/// Distinct seeded browsers the driver pushes to, in turn.
const SUBSCRIPTIONS: usize = 64;

/// Where the driver lives: `load-tests/webpush-node`.
pub fn driver_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("webpush-node")
}

/// What one run of the driver did (its own JSON line), with the rate and
/// CPU per push worked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpmRun {
    pub concurrency: usize,
    pub requests: u64,
    pub accepted: u64,
    pub failed: u64,
    pub seconds: f64,
    /// CPU of the Node process over the run (`process.cpuUsage()`).
    pub user_s: f64,
    pub system_s: f64,
    pub first_error: Option<String>,
    #[serde(default)]
    pub per_s: f64,
    #[serde(default)]
    pub cpu_us_per_push: f64,
}

/// Reads the driver's output: its last non-empty line, as JSON.
pub fn parse_output(stdout: &str) -> Result<NpmRun> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .context("the web-push driver printed nothing")?;
    let mut run: NpmRun =
        serde_json::from_str(line).with_context(|| format!("the web-push driver printed {line:?}"))?;
    if run.accepted == 0 {
        bail!(
            "the mock accepted none of the web-push library's {} pushes (first error: {})",
            run.requests,
            run.first_error.as_deref().unwrap_or("none")
        );
    }
    run.per_s = run.accepted as f64 / run.seconds.max(1e-9);
    run.cpu_us_per_push = (run.user_s + run.system_s) * 1e6 / run.accepted as f64;
    Ok(run)
}

/// Checks that node and npm run, and installs the driver's dependencies
/// (`npm ci`, from the committed lock file) when they are missing.
pub async fn ensure_installed(dir: &Path) -> Result<()> {
    for tool in ["node", "npm"] {
        let ran = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(anyhow::Error::from)
            .and_then(|child| wait_bounded(child, Duration::from_secs(30)));
        if !ran.is_ok_and(|out| out.status.success()) {
            bail!(
                "`{tool}` is not installed: the web-push comparison needs Node.js 18 or later and npm \
                 (Debian: `apt-get install nodejs npm`)"
            );
        }
    }
    if dir.join("node_modules/web-push/package.json").exists() {
        return Ok(());
    }
    println!("installing the web-push library: npm ci in {}", dir.display());
    let npm = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running npm ci")?;
    let out = tokio::task::spawn_blocking(move || wait_bounded(npm, INSTALL_TIMEOUT)).await??;
    if !out.status.success() {
        bail!("npm ci failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// One run: `count` pushes, `concurrency` in flight, stopped after
/// `deadline` whatever is left.
pub async fn drive(
    dir: &Path,
    mock: &WebPushMock,
    count: u64,
    concurrency: usize,
    deadline: Duration,
) -> Result<NpmRun> {
    let subscriptions = (0..SUBSCRIPTIONS)
        .map(|n| {
            let s = mock.seeded_subscription(&format!("webpushnpm{n:08}"))?;
            Ok(json!({"endpoint": s.endpoint, "keys": {"p256dh": s.p256dh, "auth": s.auth}}))
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = json!({
        "vapid_private_key_file": mock.vapid_key_file,
        "vapid_subject": mock.vapid_subject,
        "subscriptions": subscriptions,
        "payload": {"title": "Benchmark", "body": "web-push library",
                    "notification_id": CEILING_NOTIFICATION_ID},
        "count": count,
        "concurrency": concurrency,
        "deadline_s": deadline.as_secs_f64(),
    });
    let mut child = Command::new("node")
        .arg("send.mjs")
        .current_dir(dir)
        .env("NODE_EXTRA_CA_CERTS", &mock.ca_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running node")?;
    let mut stdin = child.stdin.take().context("node's standard input")?;
    stdin.write_all(plan.to_string().as_bytes())?;
    drop(stdin);
    let out = tokio::task::spawn_blocking(move || wait_bounded(child, deadline + GRACE)).await??;
    if !out.status.success() {
        bail!(
            "the web-push driver failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_output(&String::from_utf8_lossy(&out.stdout))
}

/// Waits for `child` at most `limit` (killed then), gathering its output
/// (small: one line, or an error message).
fn wait_bounded(mut child: Child, limit: Duration) -> Result<Output> {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{limit:?} went by and the process had not ended: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)?;
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut stderr)?;
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_output;

    #[test]
    fn the_drivers_line_gives_the_rate_and_cpu_per_push() {
        let out = "(node:1) a warning\n\
            {\"concurrency\":64,\"requests\":1000,\"accepted\":800,\"failed\":200,\"seconds\":0.5,\
             \"user_s\":0.3,\"system_s\":0.1,\"first_error\":\"503 busy\"}\n\n";
        let run = parse_output(out).expect("parses");
        assert_eq!((run.concurrency, run.accepted, run.failed), (64, 800, 200));
        assert!((run.per_s - 1600.0).abs() < 1e-6, "{}", run.per_s);
        assert!(
            (run.cpu_us_per_push - 500.0).abs() < 1e-6,
            "{}",
            run.cpu_us_per_push
        );
        assert_eq!(run.first_error.as_deref(), Some("503 busy"));
    }

    #[test]
    fn no_line_garbage_or_nothing_accepted_is_an_error() {
        assert!(parse_output("\n").is_err());
        assert!(parse_output("Error: cannot find module 'web-push'\n").is_err());
        let none = "{\"concurrency\":1,\"requests\":5,\"accepted\":0,\"failed\":5,\"seconds\":1,\
                    \"user_s\":0,\"system_s\":0,\"first_error\":\"403 bad vapid\"}";
        let err = parse_output(none).expect_err("nothing accepted");
        assert!(err.to_string().contains("403 bad vapid"), "{err}");
    }
}
