//! How fast the mocks serve: both mocks in this process, driven by `h2load`
//! (from the `nghttp2-client` package) with valid pushes, so the benchmark
//! of the pipeline knows the mocks are not its bottleneck.

use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::json;

use super::{git_commit, write_json};
use crate::mocks::{ApnsMock, ApnsMockConfig, FcmMock, FcmMockConfig};

#[derive(Debug, clap::Args)]
pub struct MocksArgs {
    /// Requests per mock.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// HTTP/2 connections h2load opens.
    #[arg(long, default_value_t = 2)]
    pub connections: u32,
    /// Concurrent streams per connection.
    #[arg(long, default_value_t = 500)]
    pub streams: u32,
    /// h2load threads.
    #[arg(long, default_value_t = 1)]
    pub h2load_threads: u32,
    /// Where the JSON report goes.
    #[arg(long, default_value = "load-tests/results/mocks-h2load.json")]
    pub out: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct H2loadRun {
    pub requests: u64,
    pub succeeded: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub status_2xx: u64,
}

#[derive(Debug, Serialize)]
pub struct MocksReport {
    pub apns: H2loadRun,
    pub fcm: H2loadRun,
    pub connections: u32,
    pub streams: u32,
    pub h2load_threads: u32,
    pub cpus: usize,
    pub git_commit: Option<String>,
}

pub async fn run(args: MocksArgs) -> Result<MocksReport> {
    let dir = std::env::temp_dir().join(format!("clarion-mock-bench-{}", std::process::id()));
    let apns = ApnsMock::start(ApnsMockConfig::local(dir.clone())).await?;
    let fcm = FcmMock::start(FcmMockConfig::local(dir.clone())).await?;

    let apns_run = apns_h2load_run(&apns, &args)?;
    println!(
        "mock APNs: {:.0} requests/s ({} of {} succeeded)",
        apns_run.requests_per_s, apns_run.status_2xx, apns_run.requests
    );

    // The dispatcher's own OAuth2 client fetches the access token.
    let (_, auth) =
        clarion_dispatcher::fcm::auth::from_credentials(&fcm.credentials_file, Some(&fcm.ca_file))
            .await
            .map_err(anyhow::Error::msg)?;
    let authorization = auth.header().await.map_err(anyhow::Error::msg)?;
    let fcm_payload = dir.join("fcm-payload.json");
    let fcm_token = format!("bench:APA91b{}", "Ab-_9".repeat(24));
    std::fs::write(
        &fcm_payload,
        json!({"message": {"token": fcm_token, "notification": {"title": "Bench", "body": "h2load"},
                           "android": {"priority": "high", "ttl": "3600s"},
                           "data": {"notification_id": super::ceiling::CEILING_NOTIFICATION_ID}}})
        .to_string(),
    )?;
    let fcm_run = h2load(
        &args,
        &format!("{}/v1/projects/{}/messages:send", fcm.endpoint, fcm.project_id),
        &[
            format!("authorization: {}", authorization.to_str()?),
            "content-type: application/json".into(),
        ],
        &fcm_payload,
    )?;
    println!(
        "mock FCM: {:.0} requests/s ({} of {} succeeded)",
        fcm_run.requests_per_s, fcm_run.status_2xx, fcm_run.requests
    );
    let _ = std::fs::remove_dir_all(&dir);

    let report = MocksReport {
        apns: apns_run,
        fcm: fcm_run,
        connections: args.connections,
        streams: args.streams,
        h2load_threads: args.h2load_threads,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        git_commit: git_commit(),
    };
    write_json(&args.out, &report)?;
    Ok(report)
}

/// h2load against the APNs mock: its requests per second (a reference for
/// the ceiling; fails when h2load is not installed).
pub async fn h2load_apns(apns: &ApnsMock, requests: u64) -> Result<f64> {
    let args = MocksArgs {
        requests,
        connections: 2,
        streams: 500,
        h2load_threads: 1,
        out: PathBuf::new(),
    };
    Ok(apns_h2load_run(apns, &args)?.requests_per_s)
}

fn apns_h2load_run(apns: &ApnsMock, args: &MocksArgs) -> Result<H2loadRun> {
    let key = std::fs::read(&apns.key_file)?;
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(apns.key_id.clone());
    let provider_token = jsonwebtoken::encode(
        &header,
        &json!({"iss": apns.team_id, "iat": unix_s()}),
        &EncodingKey::from_ec_pem(&key)?,
    )?;
    let payload = std::env::temp_dir().join(format!("clarion-h2load-apns-{}.json", std::process::id()));
    std::fs::write(
        &payload,
        json!({"aps": {"alert": {"title": "Bench", "body": "h2load"}},
               "notification_id": super::ceiling::CEILING_NOTIFICATION_ID})
        .to_string(),
    )?;
    let token = "0123456789abcdef".repeat(4);
    let run = h2load(
        args,
        &format!("{}/3/device/{token}", apns.endpoint),
        &[
            format!("authorization: bearer {provider_token}"),
            format!("apns-topic: {}", apns.bundle_id),
            "apns-push-type: alert".into(),
            "apns-priority: 10".into(),
        ],
        &payload,
    );
    let _ = std::fs::remove_file(&payload);
    run
}

fn h2load(args: &MocksArgs, url: &str, headers: &[String], payload: &std::path::Path) -> Result<H2loadRun> {
    let mut command = Command::new("h2load");
    command
        .arg(format!("-n{}", args.requests))
        .arg(format!("-c{}", args.connections))
        .arg(format!("-m{}", args.streams))
        .arg(format!("-t{}", args.h2load_threads))
        .arg("-d")
        .arg(payload);
    for header in headers {
        command.arg("-H").arg(header);
    }
    let output = command
        .arg(url)
        .output()
        .context("running h2load (install the nghttp2-client package)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!("h2load failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    }
    parse_h2load(&text).with_context(|| format!("unexpected h2load output:\n{text}"))
}

/// Reads the summary lines of h2load's output.
pub fn parse_h2load(text: &str) -> Option<H2loadRun> {
    let finished = text.lines().find(|l| l.starts_with("finished in"))?;
    let mut parts = finished.trim_start_matches("finished in ").split(", ");
    let seconds = parse_duration(parts.next()?)?;
    let requests_per_s: f64 = parts.next()?.trim_end_matches(" req/s").parse().ok()?;
    let requests_line = text.lines().find(|l| l.starts_with("requests:"))?;
    let number = |label: &str| -> Option<u64> {
        requests_line
            .split(", ")
            .find(|part| part.trim_end().ends_with(label))?
            .split_whitespace()
            .rev()
            .nth(1)?
            .parse()
            .ok()
    };
    let codes = text.lines().find(|l| l.starts_with("status codes:"))?;
    let status_2xx = codes
        .trim_start_matches("status codes: ")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(H2loadRun {
        requests: number("total")?,
        succeeded: number("succeeded")?,
        seconds,
        requests_per_s,
        status_2xx,
    })
}

fn parse_duration(text: &str) -> Option<f64> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse::<f64>().ok().map(|ms| ms / 1000.0);
    }
    text.strip_suffix('s')?.parse().ok()
}

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::parse_h2load;

    #[test]
    fn reads_the_summary() {
        let output = "starting benchmark...\n\
            finished in 5.21s, 191938.58 req/s, 9.70MB/s\n\
            requests: 1000000 total, 1000000 started, 1000000 done, 999990 succeeded, 10 failed, 0 errored, 0 timeout\n\
            status codes: 999990 2xx, 0 3xx, 10 4xx, 0 5xx\n";
        let run = parse_h2load(output).unwrap();
        assert_eq!(
            (run.requests, run.succeeded, run.status_2xx),
            (1_000_000, 999_990, 999_990)
        );
        assert!((run.seconds - 5.21).abs() < 1e-9 && (run.requests_per_s - 191_938.58).abs() < 1e-6);
    }
}
