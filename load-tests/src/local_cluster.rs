//! A Clarion cluster of real processes on this machine (the release
//! binaries next to the running one), for the demo and the benchmarks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use reqwest::{Client, StatusCode};
use serde_json::Value;

use crate::process::{ServiceProcess, free_port};

/// The keys the local cluster's coordinator accepts, named in its keys
/// file ([`KEYS_FILE`]): the phone app's, the newsroom's and an operator's.
pub const APP_KEY: &str = "local-app-key";
pub const DESK_KEY: &str = "local-desk-key";
/// Longest wait for one answer of the coordinator's API.
pub const API_TIMEOUT: Duration = Duration::from_secs(15);
pub const ADMIN_KEY: &str = "local-admin-key";

/// The coordinator's keys file (`CLARION_API_KEYS_FILE`, written beside
/// its log): each key with a name, which the console, the audit log and
/// the coordinator's log show instead of a fingerprint.
pub const KEYS_FILE: &str = r#"[keys.app]
key = "local-app-key"
scopes = ["register"]

[keys.newsroom]
key = "local-desk-key"
scopes = ["send"]

[keys.ops]
key = "local-admin-key"
scopes = ["admin"]
"#;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `CLARION_*` settings of a process.
pub type Env = Vec<(String, String)>;

/// How to run the cluster.
#[derive(Debug, Clone)]
pub struct LocalClusterConfig {
    pub database_url: String,
    pub amqp_url: String,
    /// AMQP namespace of this run.
    pub namespace: String,
    pub harvesters: usize,
    /// Extra `CLARION_*` settings per kind of service.
    pub coordinator_env: Env,
    pub harvester_env: Env,
    /// One dispatcher per platform is started when this is not empty; it
    /// holds the provider settings (endpoints, credentials, CA).
    pub dispatcher_env: Env,
    pub log_dir: PathBuf,
}

/// A service of a [`LocalCluster`], by its place in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    Coordinator,
    /// The n-th harvester started.
    Harvester(usize),
    /// The n-th dispatcher started (`start_dispatchers` starts iOS first).
    Dispatcher(usize),
}

pub struct LocalCluster {
    pub base: String,
    pub http: Client,
    pub coordinator: ServiceProcess,
    pub harvesters: Vec<ServiceProcess>,
    pub dispatchers: Vec<ServiceProcess>,
    /// Dispatchers started so far, stopped ones included: each gets a log
    /// of its own, so a later phase's dispatchers keep an earlier one's.
    dispatchers_started: usize,
    config: LocalClusterConfig,
}

/// The settings every service of the cluster shares.
fn common_env(config: &LocalClusterConfig) -> Env {
    vec![
        ("CLARION_DATABASE_URL".into(), config.database_url.clone()),
        ("CLARION_AMQP_URL".into(), config.amqp_url.clone()),
        ("CLARION_AMQP_NAMESPACE".into(), config.namespace.clone()),
    ]
}

impl LocalCluster {
    pub async fn start(config: &LocalClusterConfig) -> Result<Self> {
        let common = common_env(config);
        let http = Client::new();

        // A caller that must know the address first (the demo's phones post
        // receipts to it) names it in the coordinator's settings.
        let addr = match config
            .coordinator_env
            .iter()
            .find(|(name, _)| name == "CLARION_HTTP_ADDR")
        {
            Some((_, addr)) => addr.clone(),
            None => format!("127.0.0.1:{}", free_port()?),
        };
        let mut env = common.clone();
        env.push(("CLARION_HTTP_ADDR".into(), addr.clone()));
        // The cluster's named keys, unless the caller gives the keys.
        let keys_given = config
            .coordinator_env
            .iter()
            .any(|(name, _)| name.starts_with("CLARION_API_KEYS"));
        if !keys_given {
            std::fs::create_dir_all(&config.log_dir)
                .with_context(|| format!("creating {}", config.log_dir.display()))?;
            let keys_file = config.log_dir.join("keys.toml");
            std::fs::write(&keys_file, KEYS_FILE)
                .with_context(|| format!("writing {}", keys_file.display()))?;
            env.push(("CLARION_API_KEYS_FILE".into(), keys_file.display().to_string()));
        }
        env.extend(config.coordinator_env.iter().cloned());
        let mut coordinator =
            ServiceProcess::spawn("coordinator", "clarion-coordinator", &[], &env, &config.log_dir)?;
        let base = format!("http://{addr}");
        wait_until_ready(&http, &base, &mut coordinator).await?;

        let mut harvesters = Vec::new();
        for i in 0..config.harvesters {
            let name = format!("harvester-{i}");
            harvesters.push(
                start_worker(
                    &http,
                    &[],
                    &name,
                    "clarion-harvester",
                    &common,
                    &config.harvester_env,
                    config,
                )
                .await?,
            );
        }
        let mut cluster = Self {
            base,
            http,
            coordinator,
            harvesters,
            dispatchers: Vec::new(),
            dispatchers_started: 0,
            config: config.clone(),
        };
        if !config.dispatcher_env.is_empty() {
            cluster.start_dispatchers().await?;
        }
        Ok(cluster)
    }

    /// Starts one dispatcher per platform (and waits until they are ready).
    pub async fn start_dispatchers(&mut self) -> Result<()> {
        for platform in Platform::ALL {
            self.start_dispatcher(platform).await?;
        }
        Ok(())
    }

    /// The settings of the dispatchers started from now on.
    pub fn set_dispatcher_env(&mut self, env: Env) {
        self.config.dispatcher_env = env;
    }

    /// Starts one more dispatcher for `platform`.
    pub async fn start_dispatcher(&mut self, platform: Platform) -> Result<()> {
        self.start_dispatcher_under(&[], platform).await
    }

    /// Starts one more dispatcher for `platform` under `wrapper` (e.g.
    /// `valgrind --tool=callgrind`).
    pub async fn start_dispatcher_under(&mut self, wrapper: &[String], platform: Platform) -> Result<()> {
        let common = common_env(&self.config);
        let mut env = self.config.dispatcher_env.clone();
        env.push(("CLARION_PLATFORM".into(), platform.to_string()));
        let name = format!("dispatcher-{platform}-{}", self.dispatchers_started);
        self.dispatchers_started += 1;
        let dispatcher = start_worker(
            &self.http,
            wrapper,
            &name,
            "clarion-dispatcher",
            &common,
            &env,
            &self.config,
        )
        .await?;
        self.dispatchers.push(dispatcher);
        Ok(())
    }

    /// Starts one more harvester.
    pub async fn start_harvester(&mut self) -> Result<()> {
        let common = common_env(&self.config);
        let name = format!("harvester-{}", self.harvesters.len());
        let env = self.config.harvester_env.clone();
        let harvester = start_worker(
            &self.http,
            &[],
            &name,
            "clarion-harvester",
            &common,
            &env,
            &self.config,
        )
        .await?;
        self.harvesters.push(harvester);
        Ok(())
    }

    /// One service of the cluster.
    pub fn member_mut(&mut self, member: Member) -> Option<&mut ServiceProcess> {
        match member {
            Member::Coordinator => Some(&mut self.coordinator),
            Member::Harvester(i) => self.harvesters.get_mut(i),
            Member::Dispatcher(i) => self.dispatchers.get_mut(i),
        }
    }

    /// Starts a service again with the settings it had (stopping it first
    /// if it still runs) and waits until it is ready.
    pub async fn restart(&mut self, member: Member) -> Result<()> {
        let http = self.http.clone();
        let service = self
            .member_mut(member)
            .with_context(|| format!("no {member:?} in the cluster"))?;
        let addr = service
            .setting("CLARION_HTTP_ADDR")
            .context("the service has no CLARION_HTTP_ADDR")?
            .to_owned();
        service.restart()?;
        wait_until_ready(&http, &format!("http://{addr}"), service).await
    }

    /// Starts another coordinator on the cluster's database and broker:
    /// the first one's settings, a port of its own, then `env` (such as
    /// another `CLARION_ROLE`), as a second Deployment of the chart runs.
    /// Waits until it is ready; returns it and its base URL.
    pub async fn start_coordinator(
        &self,
        name: &str,
        env: &[(String, String)],
    ) -> Result<(ServiceProcess, String)> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut settings = self.coordinator.settings().to_vec();
        settings.push(("CLARION_HTTP_ADDR".into(), addr.clone()));
        settings.extend(env.iter().cloned());
        let mut coordinator =
            ServiceProcess::spawn(name, "clarion-coordinator", &[], &settings, &self.config.log_dir)?;
        let base = format!("http://{addr}");
        wait_until_ready(&self.http, &base, &mut coordinator).await?;
        Ok((coordinator, base))
    }

    /// Where the services write their logs.
    pub fn log_dir(&self) -> &std::path::Path {
        &self.config.log_dir
    }

    /// Stops the dispatchers (SIGTERM, as Kubernetes would).
    pub fn stop_dispatchers(&mut self) {
        for dispatcher in &mut self.dispatchers {
            dispatcher.stop();
        }
        self.dispatchers.clear();
    }

    /// `GET` an API path with the newsroom key.
    pub async fn get(&self, path: &str) -> Result<Value> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(DESK_KEY)
            .send()
            .await?;
        Ok(response.error_for_status()?.json().await?)
    }

    /// `POST …/cancel`, retried while the broker does not confirm (503):
    /// at most 5 tries, each answered within [`API_TIMEOUT`].
    pub async fn cancel(&self, id: &str) -> Result<(StatusCode, Value)> {
        let url = format!("{}/api/v1/notifications/{id}/cancel", self.base);
        let mut last = (StatusCode::SERVICE_UNAVAILABLE, Value::Null);
        for _ in 0..5 {
            let response = self
                .http
                .post(&url)
                .bearer_auth(DESK_KEY)
                .timeout(API_TIMEOUT)
                .send()
                .await?;
            let code = response.status();
            let body = response.json().await.unwrap_or(Value::Null);
            if code != StatusCode::SERVICE_UNAVAILABLE {
                return Ok((code, body));
            }
            last = (code, body);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(last)
    }

    /// Cancels the sends of earlier runs still unfinished in the database
    /// (a run killed in the middle of a send, its database reused): their
    /// jobs went to that run's queues, which nobody consumes any more, and
    /// they would hold the release window (it counts every unfinished
    /// send) until the watchdog fails them. Returns how many it cancelled:
    /// the newest 200 of each unfinished status, far more than a killed
    /// run leaves.
    pub async fn cancel_unfinished(&self) -> Result<usize> {
        let mut cancelled = 0;
        for status in ["accepted", "harvesting", "dispatching"] {
            let path = format!("/api/v1/notifications?status={status}&limit=200");
            let page = tokio::time::timeout(API_TIMEOUT, self.get(&path))
                .await
                .context("listing the unfinished sends: no answer")??;
            let ids = page["items"].as_array().into_iter().flatten();
            for id in ids.filter_map(|item| item["id"].as_str()) {
                match self.cancel(id).await?.0 {
                    code if code.is_success() => cancelled += 1,
                    // It completed meanwhile.
                    StatusCode::CONFLICT => {}
                    code => bail!("cancelling the unfinished send {id}: {code}"),
                }
            }
        }
        Ok(cancelled)
    }

    /// Sends a notification; returns its id.
    pub async fn send(&self, body: &Value) -> Result<String> {
        let response = self
            .http
            .post(format!("{}/api/v1/notifications", self.base))
            .bearer_auth(DESK_KEY)
            .json(body)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if !status.is_success() {
            bail!("the coordinator refused the notification: {status} {answer}");
        }
        answer["id"]
            .as_str()
            .map(str::to_owned)
            .context("no id in the coordinator's answer")
    }

    pub fn stop(&mut self) {
        for service in self.dispatchers.iter_mut().chain(&mut self.harvesters) {
            service.stop();
        }
        self.coordinator.stop();
    }
}

/// Starts a harvester or dispatcher with its own health port and waits
/// until it is ready.
async fn start_worker(
    http: &Client,
    wrapper: &[String],
    name: &str,
    binary: &str,
    common: &[(String, String)],
    extra: &[(String, String)],
    config: &LocalClusterConfig,
) -> Result<ServiceProcess> {
    let health = format!("127.0.0.1:{}", free_port()?);
    let mut env = common.to_vec();
    env.push(("CLARION_HTTP_ADDR".into(), health.clone()));
    env.extend(extra.iter().cloned());
    let mut service = ServiceProcess::spawn_under(wrapper, name, binary, &[], &env, &config.log_dir)?;
    wait_until_ready(http, &format!("http://{health}"), &mut service).await?;
    Ok(service)
}

/// Waits for `/readyz` of a service, failing early if it exits.
pub async fn wait_until_ready(http: &Client, base: &str, service: &mut ServiceProcess) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        service.ensure_running()?;
        if let Ok(response) = http.get(format!("{base}/readyz")).send().await
            && response.status() == StatusCode::OK
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} was not ready after {READY_TIMEOUT:?}; last log lines:\n{}",
                service.name,
                service.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes every queue and exchange of a run's namespace (`amqp_url` may
/// list a cluster's nodes).
pub async fn delete_namespace(amqp_url: &str, namespace: &str) {
    let names = clarion_proto::Names::new(namespace);
    let Ok(trust) = clarion_runtime::Trust::load(&clarion_runtime::TlsSettings::default()) else {
        return;
    };
    let connection =
        clarion_runtime::amqp::connect::open(amqp_url, lapin::ConnectionProperties::default(), &trust).await;
    if let Ok(connection) = connection {
        if let Ok(channel) = connection.create_channel().await {
            let _ = clarion_runtime::amqp::topology::delete(&channel, &names).await;
            // Closed before the connection: a channel only dropped is still
            // closing when the connection goes, and lapin logs that as an error.
            let _ = channel.close(200, "run done".into()).await;
        }
        let _ = connection.close(200, "run done".into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_coordinator::auth::{KeySet, Scope};

    #[test]
    fn every_key_of_the_local_cluster_has_a_name_and_one_is_an_admin() {
        let keys = KeySet::from_toml(KEYS_FILE, None).expect("a valid keys file");
        for (key, name, scope) in [
            (APP_KEY, "app", Scope::Register),
            (DESK_KEY, "newsroom", Scope::Send),
            (ADMIN_KEY, "ops", Scope::Admin),
        ] {
            let caller = keys.identify(key).expect("a key the coordinator accepts");
            assert_eq!(caller.key_name, name);
            assert!(caller.require(scope).is_ok(), "{name} has {scope:?}");
        }
    }
}
