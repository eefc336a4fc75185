//! The cluster itself: start, drive, observe, stop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use clarion_coordinator::Coordinator;
use clarion_dispatcher::Dispatcher;
use clarion_harvester::Harvester;
use clarion_proto::codec::decode;
use clarion_proto::{Names, Platform, TokenBatch};
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use clarion_runtime::{BrokerSettings, TlsSettings, Trust};
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use reqwest::{Client, StatusCode};
use serde_json::Value;

use crate::mocks::control::MockState;
use crate::mocks::{ApnsMock, ApnsMockConfig, FcmMock, FcmMockConfig, WebPushMock, WebPushMockConfig};

/// Keys the cluster's coordinator accepts.
pub const APP_KEY: &str = "test-app-key";
pub const DESK_KEY: &str = "test-desk-key";
/// For the admin endpoints (held tokens, audit log).
pub const ADMIN_KEY: &str = "test-admin-key";
/// Where the mock web push services listen: the one push-service host
/// the cluster's coordinator and dispatchers allow.
pub const WEB_PUSH_HOST: &str = "127.0.0.1";

/// Extra flags for each kind of service.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    pub coordinator: Vec<String>,
    pub harvester: Vec<String>,
    pub harvesters: usize,
    pub dispatcher: Vec<String>,
    /// Start the mock APNs, FCM and web push service and one dispatcher
    /// per platform.
    pub dispatchers: bool,
    /// Other PostgreSQL and RabbitMQ servers than the machine's own (such
    /// as throw-away ones reached over TLS); `None` for the machine's.
    pub servers: Option<ClusterServers>,
    /// The phones behind the mocks post receipts to the cluster's
    /// coordinator as these settings say (their `url` and `key` are set to
    /// the coordinator's and [`APP_KEY`]).
    pub receipts: Option<crate::mocks::ReceiptsConfig>,
}

/// Where a cluster's PostgreSQL and RabbitMQ are, and what to trust there.
#[derive(Debug, Clone)]
pub struct ClusterServers {
    /// A database URL on that server from which test databases can be
    /// created; its `sslmode` is kept for every service.
    pub admin_database_url: String,
    /// The broker URL every service uses (`amqps://` for TLS).
    pub amqp_url: String,
    /// `CLARION_EXTRA_CA_FILE` for every service and the test's own
    /// connections (the dispatchers' bundle gets the mocks' CAs too).
    pub extra_ca_file: Option<PathBuf>,
}

/// The mock APNs, FCM and web push service the cluster's dispatchers
/// talk to.
pub struct Mocks {
    pub apns: ApnsMock,
    pub fcm: FcmMock,
    pub web: WebPushMock,
    /// The mocks' CA certificates, for `--extra-ca-file`.
    pub ca_file: PathBuf,
    dir: PathBuf,
}

impl Drop for Mocks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Mocks {
    pub async fn start() -> Self {
        Self::start_as("com.clarion.news", "CLARIONK01", "clarion-news").await
    }

    /// Mocks of another app's Apple, Google and push service: its bundle
    /// id, APNs key id and Firebase project (and a key, a service account
    /// and a VAPID key of their own).
    pub async fn start_as(bundle_id: &str, apns_key_id: &str, fcm_project: &str) -> Self {
        Self::start_reporting(bundle_id, apns_key_id, fcm_project, None).await
    }

    /// Mocks whose phones post receipts as `receipts` says.
    pub async fn start_reporting(
        bundle_id: &str,
        apns_key_id: &str,
        fcm_project: &str,
        receipts: Option<crate::mocks::ReceiptsConfig>,
    ) -> Self {
        let dir = std::env::temp_dir().join(format!("clarion-mocks-{}", uuid::Uuid::new_v4().simple()));
        let apns_config = ApnsMockConfig {
            bundle_id: bundle_id.into(),
            key_id: apns_key_id.into(),
            receipts: receipts.clone(),
            ..ApnsMockConfig::local(dir.clone())
        };
        let apns = ApnsMock::start(apns_config).await.expect("mock APNs starts");
        let fcm_config = FcmMockConfig {
            project_id: fcm_project.into(),
            receipts: receipts.clone(),
            ..FcmMockConfig::local(dir.clone())
        };
        let fcm = FcmMock::start(fcm_config).await.expect("mock FCM starts");
        let web_config = WebPushMockConfig {
            subject: format!("mailto:push@{fcm_project}.test"),
            receipts,
            ..WebPushMockConfig::local(dir.clone())
        };
        let web = WebPushMock::start(web_config)
            .await
            .expect("mock web push service starts");
        let ca_file = dir.join("extra-ca.pem");
        let all = [&apns.ca_file, &fcm.ca_file, &web.ca_file]
            .iter()
            .map(|path| std::fs::read_to_string(path).expect("a CA file"))
            .collect::<String>();
        std::fs::write(&ca_file, all).expect("CA bundle written");
        Self {
            apns,
            fcm,
            web,
            ca_file,
            dir,
        }
    }

    /// Adds the certificates of `pem_file` to the bundle the dispatchers
    /// trust.
    pub fn also_trust(&self, pem_file: &Path) {
        let mut bundle = std::fs::read_to_string(&self.ca_file).expect("the mocks' CA bundle");
        bundle.push_str(&std::fs::read_to_string(pem_file).expect("a CA file to trust"));
        std::fs::write(&self.ca_file, bundle).expect("CA bundle written");
    }

    /// The mock standing in for `platform`'s provider.
    pub fn state(&self, platform: Platform) -> &MockState {
        match platform {
            Platform::Ios => &self.apns.state,
            Platform::Android => &self.fcm.state,
            Platform::Web => &self.web.state,
        }
    }

    /// Dispatcher settings pointing at the mocks, as environment variables.
    pub fn dispatcher_env(&self) -> Vec<(String, String)> {
        let mut env = self.apns.env();
        env.push(("CLARION_APNS_SANDBOX_ENDPOINT".into(), self.apns.endpoint.clone()));
        env.extend(self.fcm.env());
        env.extend(self.web.env());
        env.push(("CLARION_EXTRA_CA_FILE".into(), self.ca_file.display().to_string()));
        env
    }

    /// An apps file table (`[apps.<app>]`) pointing at these mocks.
    pub fn app_table(&self, app: &str) -> String {
        crate::mocks::apps_file_table(app, &self.apns, &self.fcm) + &self.web.app_table(app)
    }

    /// Dispatcher flags pointing at the mocks.
    pub fn dispatcher_args(&self) -> Vec<String> {
        vec![
            format!("--apns-endpoint={}", self.apns.endpoint),
            format!("--apns-sandbox-endpoint={}", self.apns.endpoint),
            format!("--apns-channels-endpoint={}", self.apns.endpoint),
            format!("--apns-channels-sandbox-endpoint={}", self.apns.endpoint),
            format!("--apns-key-file={}", self.apns.key_file.display()),
            format!("--apns-key-id={}", self.apns.key_id),
            format!("--apns-team-id={}", self.apns.team_id),
            format!("--apns-topic={}", self.apns.bundle_id),
            format!("--fcm-endpoint={}", self.fcm.endpoint),
            format!("--fcm-credentials-file={}", self.fcm.credentials_file.display()),
            format!("--vapid-private-key-file={}", self.web.vapid_key_file.display()),
            format!("--vapid-subject={}", self.web.vapid_subject),
            format!("--webpush-allowed-hosts={WEB_PUSH_HOST}"),
            format!("--extra-ca-file={}", self.ca_file.display()),
        ]
    }
}

pub struct Cluster {
    pub db: TestDatabase,
    pub broker: BrokerSettings,
    pub names: Names,
    pub base: String,
    pub http: Client,
    pub harvesters: Vec<Harvester>,
    pub dispatchers: Vec<Dispatcher>,
    /// Present when the options asked for dispatchers.
    pub mocks: Option<Mocks>,
    /// What the services and the test's own connections trust.
    pub trust: Trust,
    options: ClusterOptions,
    coordinator: Option<Coordinator>,
    /// The coordinator's command line, for [`Cluster::restart_coordinator`].
    coordinator_args: Vec<String>,
    pub(crate) amqp: Connection,
    _namespace: TestNamespace,
}

impl Cluster {
    /// A coordinator and `options.harvesters` harvesters, ready to send.
    pub async fn start(options: ClusterOptions) -> Self {
        let tls = TlsSettings {
            extra_ca_file: options.servers.as_ref().and_then(|s| s.extra_ca_file.clone()),
        };
        let trust = Trust::load(&tls).expect("the trusted certificates load");
        let (db, namespace) = match &options.servers {
            Some(servers) => (
                TestDatabase::create_at(&servers.admin_database_url, &trust).await,
                TestNamespace::at(&servers.amqp_url, &trust),
            ),
            None => (TestDatabase::create().await, TestNamespace::new()),
        };
        let broker = namespace.settings.clone();
        let names = Names::new(broker.namespace.clone());
        let mut args = vec![
            "clarion-coordinator".to_owned(),
            "--http-addr=127.0.0.1:0".into(),
            "--http-workers=2".into(),
            format!("--api-keys={APP_KEY}=register,{DESK_KEY}=send,{ADMIN_KEY}=admin"),
            format!("--database-url={}", db.url),
            "--database-pool-size=8".into(),
            format!("--amqp-url={}", broker.url),
            format!("--amqp-namespace={}", broker.namespace),
            format!("--webpush-allowed-hosts={WEB_PUSH_HOST}"),
            // Tests act on what the status says at once (kill a node
            // mid-harvest, wait for a job): a status up to a second old
            // would come too late. The cache itself is tested in
            // coordinator/tests/status_reads.rs; a test may set its own.
            "--status-refresh-ms=1".into(),
        ];
        args.extend(extra_ca_arg(&options));
        args.extend(options.coordinator.iter().cloned());
        let coordinator_args = args.clone();
        let settings = clarion_coordinator::Settings::try_parse_from(args).expect("coordinator settings");
        let coordinator = clarion_coordinator::start(settings)
            .await
            .expect("coordinator starts");
        let base = format!("http://{}", coordinator.addr());
        let http = Client::new();
        // The coordinator declares the topology before it is ready; services
        // started later find every queue complete.
        wait_until_ready(&http, &base).await;
        let amqp = clarion_runtime::amqp::connect::open(&broker.url, ConnectionProperties::default(), &trust)
            .await
            .expect("test connection to RabbitMQ");
        let mut cluster = Self {
            base,
            http,
            db,
            broker,
            names,
            harvesters: Vec::new(),
            dispatchers: Vec::new(),
            mocks: None,
            trust,
            options,
            coordinator: Some(coordinator),
            coordinator_args,
            amqp,
            _namespace: namespace,
        };
        for _ in 0..cluster.options.harvesters {
            cluster.start_harvester(&[]).await;
        }
        if cluster.options.dispatchers {
            cluster.start_mocks().await;
            for platform in Platform::ALL {
                cluster.start_dispatcher(platform, &[]).await;
            }
        }
        cluster
    }

    /// Stops the coordinator gracefully and starts it again with the same
    /// settings (on a new port: `base` follows), once it is ready.
    pub async fn restart_coordinator(&mut self) {
        if let Some(coordinator) = self.coordinator.take() {
            coordinator.stop().await;
        }
        let settings = clarion_coordinator::Settings::try_parse_from(self.coordinator_args.clone())
            .expect("coordinator settings");
        let coordinator = clarion_coordinator::start(settings)
            .await
            .expect("coordinator starts again");
        self.base = format!("http://{}", coordinator.addr());
        wait_until_ready(&self.http, &self.base).await;
        self.coordinator = Some(coordinator);
    }

    /// The mocks (the cluster must have been started with dispatchers).
    pub fn mocks(&self) -> &Mocks {
        self.mocks.as_ref().expect("a cluster started with dispatchers")
    }

    /// Starts one more dispatcher for `platform` with the cluster's flags
    /// plus `extra`; returns its index in `dispatchers`.
    pub async fn start_dispatcher(&mut self, platform: Platform, extra: &[&str]) -> usize {
        // The mocks' bundle, which holds the servers' CA too.
        let mut flags = self.mocks().dispatcher_args();
        flags.extend(self.options.dispatcher.iter().cloned());
        flags.extend(extra.iter().map(|arg| arg.to_string()));
        self.try_start_dispatcher_with(platform, flags)
            .await
            .expect("dispatcher starts")
    }

    /// Starts one more dispatcher for `platform` with only the broker's
    /// and the retry flags plus `flags`: no mock credentials for the
    /// `default` app, unlike [`Cluster::start_dispatcher`]. Returns its
    /// index in `dispatchers`, or why it did not start.
    pub async fn try_start_dispatcher_with(
        &mut self,
        platform: Platform,
        flags: Vec<String>,
    ) -> Result<usize, clarion_dispatcher::StartError> {
        let mut args = vec![
            "clarion-dispatcher".to_owned(),
            format!("--platform={platform}"),
            "--http-addr=127.0.0.1:0".into(),
            format!("--amqp-url={}", self.broker.url),
            format!("--amqp-namespace={}", self.broker.namespace),
            "--dispatch-retry-base-ms=20".into(),
            "--dispatch-retry-max-ms=500".into(),
        ];
        args.extend(flags);
        let settings = clarion_dispatcher::Settings::try_parse_from(args).expect("dispatcher settings");
        self.dispatchers.push(clarion_dispatcher::start(settings).await?);
        Ok(self.dispatchers.len() - 1)
    }

    /// Waits until the notification is complete (or cancelled / failed and
    /// fully reported) and returns its status.
    pub async fn wait_until_settled(&self, id: &str, timeout: Duration) -> Value {
        self.wait_for_status(id, timeout, |s| !s["completed_at"].is_null())
            .await
    }

    /// Starts one more harvester with the cluster's flags plus `extra`;
    /// returns its index in `harvesters`.
    pub async fn start_harvester(&mut self, extra: &[&str]) -> usize {
        let mut args = vec![
            "clarion-harvester".to_owned(),
            "--http-addr=127.0.0.1:0".into(),
            format!("--database-url={}", self.db.url),
            // Two per harvest worker: its stream and its ledger's writer.
            "--database-pool-size=8".into(),
            format!("--amqp-url={}", self.broker.url),
            format!("--amqp-namespace={}", self.broker.namespace),
        ];
        args.extend(extra_ca_arg(&self.options));
        args.extend(self.options.harvester.iter().cloned());
        args.extend(extra.iter().map(|arg| arg.to_string()));
        let settings = clarion_harvester::Settings::try_parse_from(args).expect("harvester settings");
        self.harvesters.push(
            clarion_harvester::start(settings)
                .await
                .expect("harvester starts"),
        );
        self.harvesters.len() - 1
    }

    /// A direct connection to the cluster's database.
    pub async fn sql(&self) -> tokio_postgres::Client {
        self.db.client().await
    }

    /// `POST /api/v1/notifications`; returns the status code and body.
    pub async fn send(&self, body: &Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}/api/v1/notifications", self.base))
            .bearer_auth(DESK_KEY)
            .json(body)
            .send()
            .await
            .expect("send request");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `POST /api/v1/notifications/{id}/cancel`; returns the status code and body.
    pub async fn cancel(&self, id: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}/api/v1/notifications/{id}/cancel", self.base))
            .bearer_auth(DESK_KEY)
            .send()
            .await
            .expect("cancel request");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Starts the mock APNs, FCM and web push service when the cluster was started without
    /// dispatchers, so dispatchers can be started later.
    pub async fn start_mocks(&mut self) {
        if self.mocks.is_none() {
            let receipts = self
                .options
                .receipts
                .clone()
                .map(|config| crate::mocks::ReceiptsConfig {
                    url: format!("{}/api/v1/receipts", self.base),
                    key: APP_KEY.into(),
                    ..config
                });
            let mocks =
                Mocks::start_reporting("com.clarion.news", "CLARIONK01", "clarion-news", receipts).await;
            if let Some(ca) = self
                .options
                .servers
                .as_ref()
                .and_then(|s| s.extra_ca_file.as_ref())
            {
                mocks.also_trust(ca);
            }
            self.mocks = Some(mocks);
        }
    }

    /// `GET /api/v1/topics/{topic}` (which also warms the planning cache).
    pub async fn topic_size(&self, topic: &str) -> Value {
        self.http
            .get(format!("{}/api/v1/topics/{topic}", self.base))
            .bearer_auth(DESK_KEY)
            .send()
            .await
            .expect("topic request")
            .json()
            .await
            .expect("topic body")
    }

    /// Polls `GET /api/v1/topics/{topic}` until it counts `subscribers`, so
    /// the planner knows the topic's size when a send follows.
    pub async fn wait_for_topic_size(&self, topic: &str, subscribers: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let size = self.topic_size(topic).await;
            if size["subscribers"].as_u64() == Some(subscribers) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {topic} never counted {subscribers}: {size}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET /api/v1/notifications/{id}`.
    pub async fn status(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/api/v1/notifications/{id}", self.base))
            .bearer_auth(DESK_KEY)
            .send()
            .await
            .expect("status request")
            .json()
            .await
            .expect("status body")
    }

    /// Polls the status until `done` holds; panics with the last status after `timeout`.
    pub async fn wait_for_status(&self, id: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status(id).await;
            if done(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "notification {id} did not get there in {timeout:?}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Messages waiting in `queue`.
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let channel = self.amqp.create_channel().await.expect("channel");
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let depth = channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .expect("queue exists")
            .message_count();
        let _ = channel.close(200, "done".into()).await;
        depth
    }

    /// Acts as `platform`'s dispatcher once the harvest is over: takes every
    /// token batch waiting on its queue, until the queue is empty. Call it
    /// after the notification's jobs are all done (status `dispatching`):
    /// a job is done only once its batches are confirmed, so then every
    /// batch — and every duplicate — is already queued.
    pub async fn take_queued_batches(&self, platform: Platform) -> Vec<TokenBatch> {
        let channel = self.amqp.create_channel().await.expect("channel");
        let queue = self.names.deliver_queue(platform);
        let mut batches = Vec::new();
        while let Some(message) = channel
            .basic_get(queue.as_str().into(), BasicGetOptions::default())
            .await
            .expect("get from the delivery queue")
        {
            let delivery = message.delivery;
            batches.push(decode::<TokenBatch>(&delivery.data).expect("a token batch"));
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
        let _ = channel.close(200, "done".into()).await;
        batches
    }

    /// Stops every service; the namespace and the database are deleted when
    /// the cluster is dropped.
    pub async fn stop(mut self) {
        for dispatcher in self.dispatchers.drain(..) {
            dispatcher.stop().await;
        }
        for harvester in self.harvesters.drain(..) {
            harvester.stop().await;
        }
        if let Some(coordinator) = self.coordinator.take() {
            coordinator.stop().await;
        }
        let _ = self.amqp.close(200, "test done".into()).await;
    }
}

/// `--extra-ca-file` for the coordinator and harvesters on other servers.
fn extra_ca_arg(options: &ClusterOptions) -> Option<String> {
    let ca = options.servers.as_ref()?.extra_ca_file.as_ref()?;
    Some(format!("--extra-ca-file={}", ca.display()))
}

/// Polls `{base}/readyz` until it answers 200; panics after a minute.
async fn wait_until_ready(http: &Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = http.get(format!("{base}/readyz")).send().await;
        if answer.as_ref().is_ok_and(|r| r.status() == StatusCode::OK) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{base} not ready within a minute: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
