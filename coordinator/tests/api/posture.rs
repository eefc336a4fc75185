//! Production posture: no start without API keys (unless `--dev`), keys
//! from a file re-read when it changes, per-key send rate limits.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use reqwest::{Method, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::common::*;

/// A keys (or apps) file in the temporary directory, removed when dropped.
pub struct KeysFile {
    pub path: PathBuf,
}

impl KeysFile {
    pub fn new(text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("clarion-keys-{}.toml", uuid::Uuid::new_v4()));
        let file = Self { path };
        file.write(text);
        file
    }

    /// Replaces the content in one step (as a Secret update does).
    pub fn write(&self, text: &str) {
        let staging = self.path.with_extension("staging");
        std::fs::write(&staging, text).expect("keys file written");
        std::fs::rename(&staging, &self.path).expect("keys file swapped");
    }

    fn arg(&self) -> String {
        format!("--api-keys-file={}", self.path.display())
    }
}

impl Drop for KeysFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn sha256(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The coordinator's settings from `args`, ignoring this process's environment.
fn settings(args: &[&str]) -> clarion_coordinator::Settings {
    clarion_coordinator::Settings::try_parse_from(
        std::iter::once("clarion-coordinator").chain(args.iter().copied()),
    )
    .expect("valid settings")
}

#[actix_web::test]
async fn without_keys_the_coordinator_refuses_to_start() {
    // In-process: the start-up function says what to set.
    let err = match clarion_coordinator::start(settings(&[
        "--http-addr=127.0.0.1:0",
        "--database-url=postgres://nobody@127.0.0.1:1/none",
    ]))
    .await
    {
        Ok(_) => panic!("a coordinator without keys started"),
        Err(err) => err.to_string(),
    };
    for hint in ["CLARION_API_KEYS", "CLARION_API_KEYS_FILE", "--dev"] {
        assert!(err.contains(hint), "{hint} not in {err:?}");
    }

    // The binary exits non-zero with that message.
    let mut child = Command::new(env!("CARGO_BIN_EXE_clarion-coordinator"))
        .args([
            "--http-addr=127.0.0.1:0",
            "--database-url=postgres://nobody@127.0.0.1:1/none",
        ])
        .env_remove("CLARION_API_KEYS")
        .env_remove("CLARION_API_KEYS_FILE")
        .env_remove("CLARION_DEV")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("coordinator binary runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the coordinator") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the coordinator did not exit without keys");
        }
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr read");
    assert!(!status.success());
    assert!(
        stderr.contains("no API keys configured") && stderr.contains("CLARION_API_KEYS_FILE"),
        "{stderr}"
    );

    // A keys file that cannot be used stops the start too.
    let bad = KeysFile::new("[keys.desk]\nkey = \"k\"\nscopes = [\"everything\"]\n");
    let err =
        match clarion_coordinator::start(settings(&["--http-addr=127.0.0.1:0", bad.arg().as_str()])).await {
            Ok(_) => panic!("a coordinator with a bad keys file started"),
            Err(err) => err.to_string(),
        };
    assert!(err.contains("unknown scope"), "{err}");
}

#[actix_web::test]
async fn dev_mode_accepts_the_development_key() {
    let app = TestCoordinator::start_keyed(vec!["--dev".into()]).await;
    let response = app.get("/api/v1/audit", "dev-admin-key").await;
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

/// Waits until `key` gets `want` from GET `path` (bounded).
async fn wait_for_status(app: &TestCoordinator, path: &str, key: &str, want: StatusCode) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = app.get(path, key).await.status();
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: still {status} on {path}, wanted {want}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn a_keys_file_is_read_again_when_it_changes() {
    let first = format!(
        "[keys.newsroom]\nsha256 = \"{}\"\nscopes = [\"send\"]\n\n[keys.ops]\nkey = \"ops-s3cret\"\nscopes = [\"admin\"]\n",
        sha256("desk-s3cret")
    );
    let file = KeysFile::new(&first);
    let app = TestCoordinator::start_keyed(vec![file.arg(), "--api-keys-file-poll-secs=1".into()]).await;
    let topic = "/api/v1/topics/breaking";

    // Scopes as the file says.
    assert_eq!(app.get(topic, "desk-s3cret").await.status(), StatusCode::OK);
    assert_eq!(
        app.get("/api/v1/audit", "desk-s3cret").await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.get("/api/v1/audit", "ops-s3cret").await.status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get(topic, "fresh-s3cret").await.status(),
        StatusCode::UNAUTHORIZED
    );

    // The newsroom's key is rotated: the new one is accepted, the old refused.
    let second = format!(
        "[keys.newsroom]\nsha256 = \"{}\"\nscopes = [\"send\"]\n\n[keys.ops]\nkey = \"ops-s3cret\"\nscopes = [\"admin\"]\n",
        sha256("fresh-s3cret")
    );
    file.write(&second);
    wait_for_status(&app, topic, "fresh-s3cret", StatusCode::OK).await;
    assert_eq!(
        app.get(topic, "desk-s3cret").await.status(),
        StatusCode::UNAUTHORIZED
    );

    // A broken file keeps the keys in force; a good one after it is taken.
    file.write("[keys.newsroom]\nsha256 = \"not hex\"\n");
    for _ in 0..3 {
        actix_web::rt::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(app.get(topic, "fresh-s3cret").await.status(), StatusCode::OK);
        assert_eq!(
            app.get("/api/v1/audit", "ops-s3cret").await.status(),
            StatusCode::OK
        );
    }
    file.write("[keys.ops]\nkey = \"ops-s3cret\"\nscopes = [\"admin\"]\n");
    wait_for_status(&app, topic, "fresh-s3cret", StatusCode::UNAUTHORIZED).await;
    assert_eq!(
        app.get("/api/v1/audit", "ops-s3cret").await.status(),
        StatusCode::OK
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_key_over_its_sends_per_minute_gets_429_with_retry_after() {
    let file = KeysFile::new(
        "[keys.desk]\nkey = \"desk-s3cret\"\nscopes = [\"send\"]\nsends_per_minute = 2\n\n\
         [keys.wire]\nkey = \"wire-s3cret\"\nscopes = [\"send\"]\n",
    );
    let app = TestCoordinator::start_keyed(vec![file.arg()]).await;
    let first = uuid::Uuid::now_v7();
    let with_id = json!({"id": first, "topics": ["breaking"], "body": "Something happened"});
    let send_with_id = || {
        app.request(Method::POST, "/api/v1/notifications", Some("desk-s3cret"))
            .json(&with_id)
            .send()
    };
    assert_eq!(send_with_id().await.expect("sent").status(), StatusCode::ACCEPTED);
    assert_eq!(
        app.send("desk-s3cret", &["breaking"]).await.status(),
        StatusCode::ACCEPTED
    );
    let refused = app.send("desk-s3cret", &["breaking"]).await;
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("Retry-After in whole seconds");
    assert!((1..=30).contains(&retry_after), "Retry-After {retry_after}");
    let problem = expect_problem(refused, StatusCode::TOO_MANY_REQUESTS, "rate-limited").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("2 notifications a minute")
    );

    // A retry of an id already stored sends nothing and is never refused:
    // a client that lost its 202 can always ask again.
    for _ in 0..2 {
        assert_eq!(send_with_id().await.expect("sent").status(), StatusCode::OK);
    }

    // Other keys have their own allowance (none here).
    for _ in 0..3 {
        assert_eq!(
            app.send("wire-s3cret", &["breaking"]).await.status(),
            StatusCode::ACCEPTED
        );
    }
    let sent = stored_notifications(&app).await;
    assert_eq!(sent, 5, "the refused send stored nothing");
    app.stop().await;
}

#[actix_web::test]
async fn a_key_limited_to_lanes_gets_403_for_the_others() {
    let file =
        KeysFile::new("[keys.marketing]\nkey = \"mkt-s3cret\"\nscopes = [\"send\"]\nlanes = [\"bulk\"]\n");
    let app = TestCoordinator::start_keyed(vec![file.arg()]).await;
    let send = |lane: Option<&str>| {
        let mut body = json!({"topics": ["offers"], "body": "Ten per cent off"});
        if let Some(lane) = lane {
            body["lane"] = json!(lane);
        }
        app.request(Method::POST, "/api/v1/notifications", Some("mkt-s3cret"))
            .json(&body)
            .send()
    };
    assert_eq!(
        send(Some("bulk")).await.expect("sent").status(),
        StatusCode::ACCEPTED
    );
    for lane in [Some("urgent"), Some("standard"), None] {
        let refused = send(lane).await.expect("sent");
        let problem = expect_problem(refused, StatusCode::FORBIDDEN, "forbidden").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("may send in: bulk"), "{detail}");
    }
    let sent = stored_notifications(&app).await;
    assert_eq!(sent, 1, "refused sends store nothing");
    app.stop().await;
}

#[actix_web::test]
async fn a_key_limited_to_topics_gets_403_naming_the_rule() {
    let file = KeysFile::new(
        "[keys.sport]\nkey = \"sport-s3cret\"\nscopes = [\"send\"]\ntopics = [\"sport/*\", \"weather/london\"]\n",
    );
    let app = TestCoordinator::start_keyed(vec![file.arg()]).await;
    let send = |topics: &[&str]| {
        app.request(Method::POST, "/api/v1/notifications", Some("sport-s3cret"))
            .json(&json!({"topics": topics, "body": "Full time"}))
            .send()
    };
    let allowed = send(&["sport/football", "weather/london"]).await.expect("sent");
    assert_eq!(allowed.status(), StatusCode::ACCEPTED);
    for topics in [
        &["breaking/uk"][..],
        &["sport/football", "breaking/uk"],
        &["sport"],
    ] {
        let refused = send(topics).await.expect("sent");
        let problem = expect_problem(refused, StatusCode::FORBIDDEN, "forbidden").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        let first_refused = topics
            .iter()
            .find(|t| !t.starts_with("sport/"))
            .expect("one refused");
        assert!(detail.contains(&format!("topic `{first_refused}`")), "{detail}");
        assert!(detail.contains("allows: sport/*, weather/london"), "{detail}");
    }
    // A malformed topic is still a 422, not a 403.
    let malformed = send(&["sport/foot ball"]).await.expect("sent");
    expect_problem(malformed, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    let sent = stored_notifications(&app).await;
    assert_eq!(sent, 1, "refused sends store nothing");
    app.stop().await;
}

/// A Secret volume as the kubelet lays it out: `keys.toml -> ..data/keys.toml`,
/// `..data -> ..<timestamp>`; an update writes a new timestamped directory
/// and swaps the `..data` link in one rename.
struct SecretVolume {
    dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    fn new(text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("clarion-secret-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).expect("secret dir");
        let mut volume = Self { dir, generation: 0 };
        volume.update(text);
        std::os::unix::fs::symlink("..data/keys.toml", volume.dir.join("keys.toml")).expect("keys.toml link");
        volume
    }

    fn update(&mut self, text: &str) {
        self.generation += 1;
        let generation = format!("..generation_{}", self.generation);
        std::fs::create_dir(self.dir.join(&generation)).expect("generation dir");
        std::fs::write(self.dir.join(&generation).join("keys.toml"), text).expect("keys written");
        std::os::unix::fs::symlink(&generation, self.dir.join("..data_tmp")).expect("..data_tmp link");
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).expect("..data swapped");
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[actix_web::test]
async fn a_kubernetes_secret_update_is_picked_up() {
    let keys = |key: &str| {
        format!(
            "[keys.newsroom]\nsha256 = \"{}\"\nscopes = [\"send\"]\n",
            sha256(key)
        )
    };
    let mut volume = SecretVolume::new(&keys("before-s3cret"));
    let app = TestCoordinator::start_keyed(vec![
        format!("--api-keys-file={}", volume.dir.join("keys.toml").display()),
        "--api-keys-file-poll-secs=1".into(),
    ])
    .await;
    let topic = "/api/v1/topics/breaking";
    assert_eq!(app.get(topic, "before-s3cret").await.status(), StatusCode::OK);
    volume.update(&keys("after-s3cret"));
    wait_for_status(&app, topic, "after-s3cret", StatusCode::OK).await;
    assert_eq!(
        app.get(topic, "before-s3cret").await.status(),
        StatusCode::UNAUTHORIZED
    );
    app.stop().await;
}

/// Notifications stored, whatever their status.
async fn stored_notifications(app: &TestCoordinator) -> i64 {
    app.sql()
        .await
        .query_one("SELECT count(*) FROM notifications", &[])
        .await
        .unwrap()
        .get(0)
}

#[actix_web::test]
async fn a_key_limited_to_apps_gets_403_naming_the_rule_and_unknown_apps_are_422() {
    let keys = KeysFile::new(
        "[keys.puzzles]\nkey = \"puzzles-s3cret\"\nscopes = [\"send\", \"register\"]\napps = [\"puzzles\"]\n",
    );
    let apps = KeysFile::new(
        "[apps.puzzles]\nfcm_credentials_file = \"/nowhere/sa.json\"\n[apps.beta]\nfcm_credentials_file = \"/nowhere/sa.json\"\n",
    );
    let apps_arg = format!("--apps-file={}", apps.path.display());
    let app = TestCoordinator::start_keyed(vec![keys.arg(), apps_arg]).await;
    let send = |target: &str| {
        app.request(Method::POST, "/api/v1/notifications", Some("puzzles-s3cret"))
            .json(&json!({"app": target, "topics": ["daily"], "body": "Today's grid"}))
            .send()
    };
    assert_eq!(
        send("puzzles").await.expect("sent").status(),
        StatusCode::ACCEPTED
    );
    for other in ["default", "beta"] {
        let refused = send(other).await.expect("sent");
        let problem = expect_problem(refused, StatusCode::FORBIDDEN, "forbidden").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("app `{other}`")) && detail.contains("allows: puzzles"),
            "{detail}"
        );
    }
    let register = |target: &str| {
        app.request(
            Method::PUT,
            &format!("/api/v1/registrations/{}", "cd".repeat(32)),
            Some("puzzles-s3cret"),
        )
        .json(&json!({"app": target, "platform": "ios", "topics": ["daily"]}))
        .send()
    };
    assert_eq!(register("puzzles").await.expect("sent").status(), StatusCode::OK);
    expect_problem(
        register("beta").await.expect("sent"),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    app.stop().await;

    // With an unlimited key: an app the file does not define is a 422 that
    // names the apps there are; a malformed id too.
    let app = TestCoordinator::start_keyed(vec![
        format!("--api-keys={SEND_KEY}=send"),
        format!("--apps-file={}", apps.path.display()),
    ])
    .await;
    for (target, says) in [
        ("crosswords", "default, beta, puzzles"),
        ("Puzzles", "not an app id"),
    ] {
        let response = app
            .request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
            .json(&json!({"app": target, "topics": ["daily"], "body": "x"}))
            .send()
            .await
            .expect("sent");
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains(says),
            "{problem}"
        );
    }
    app.stop().await;
}
