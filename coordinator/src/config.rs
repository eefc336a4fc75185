//! The coordinator's settings: flags, `CLARION_*` environment variables and
//! developer-machine defaults (`clarion-coordinator --help` lists them).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::group_commit::Bounds;
use crate::hygiene::HygienePlan;
use crate::progress::completion::Valve;
use crate::release::Budget;
use crate::release::relay::Scheduling;
use crate::role::Roles;
use clap::Parser;
use clap::builder::BoolishValueParser;
use clarion_runtime::telemetry::OtlpSettings;
use clarion_runtime::{BrokerSettings, DatabaseSettings, LogSettings, ShutdownSettings, TlsSettings};

use crate::auth::{DEV_API_KEY, KeySet, file};

/// What start-up says when no keys are configured.
pub const NO_KEYS: &str = "no API keys configured: set CLARION_API_KEYS (`key=scope+scope,...`) or \
     CLARION_API_KEYS_FILE (a TOML file with one [keys.<name>] table per key, see docs/src/operate/api-keys.md); \
     on a developer machine, pass --dev (or CLARION_DEV=1) to accept the development key `dev-admin-key`";

#[derive(Debug, Clone, Parser)]
#[command(
    name = "clarion-coordinator",
    version,
    args_override_self = true,
    about = "Clarion coordinator: the HTTP API for registrations and notifications, \
             shard planning, live progress and token cleanup"
)]
pub struct Settings {
    /// Address the HTTP API (and /healthz, /readyz, /metrics) listens on.
    #[arg(
        long = "http-addr",
        env = "CLARION_HTTP_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub http_addr: SocketAddr,

    /// HTTP worker threads (default: one per CPU core).
    #[arg(long = "http-workers", env = "CLARION_HTTP_WORKERS")]
    pub http_workers: Option<usize>,

    /// Roles this coordinator runs, comma-separated: `api` (registrations,
    /// receipts, and every GET under /api/v1/notifications: status, curve,
    /// history; PostgreSQL only, no background loop), `control` (sends,
    /// cancels, the console, admin, those reads too, and every background
    /// loop: relay, scheduler, report consumers, watchdog, hygiene), or
    /// both. A route of a role not run here is answered 421 naming the
    /// role that serves it.
    #[arg(
        long = "role",
        env = "CLARION_ROLE",
        default_value = "api,control",
        value_parser = Roles::parse
    )]
    pub roles: Roles,

    /// API keys and their scopes, `key=scope+scope,...`; scopes are
    /// `register`, `send` and `admin` (admin implies every scope); every
    /// lane. Give this or --api-keys-file, not both.
    #[arg(
        long = "api-keys",
        env = "CLARION_API_KEYS",
        hide_env_values = true,
        value_parser = KeySet::parse,
        conflicts_with = "api_keys_file"
    )]
    pub api_keys: Option<KeySet>,

    /// A TOML file of API keys, one `[keys.<name>]` table per key with
    /// `sha256 = "<hex digest of the key>"` (or `key = "<key>"`), `scopes =
    /// ["send", ...]`, optionally `sends_per_minute`, `lanes = ["bulk",
    /// ...]` (every lane when absent; lanes can be limited only here),
    /// `topics = ["sport/*", ...]` and `apps = ["puzzles", ...]`;
    /// re-read when it changes (a Kubernetes Secret mounted as a volume).
    #[arg(long = "api-keys-file", env = "CLARION_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Apps beside `default`: a TOML file with one `[apps.<id>]` table each
    /// (the dispatchers read their credentials from it; the coordinator
    /// only which apps exist), re-read when it changes.
    #[arg(long = "apps-file", env = "CLARION_APPS_FILE")]
    pub apps_file: Option<PathBuf>,

    /// How often the API keys file is checked for changes, in seconds.
    #[arg(
        long = "api-keys-file-poll-secs",
        env = "CLARION_API_KEYS_FILE_POLL_SECS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub api_keys_file_poll_secs: u64,

    /// Development mode: start without API keys, accepting the well-known
    /// key `dev-admin-key` (scope admin). Never in production.
    #[arg(
        long = "dev",
        env = "CLARION_DEV",
        action = clap::ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    pub dev: bool,

    /// Most topics one device may follow.
    #[arg(
        long = "max-topics-per-device",
        env = "CLARION_MAX_TOPICS_PER_DEVICE",
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub max_topics_per_device: u32,

    /// Push-service hosts a web registration's endpoint may name,
    /// comma-separated (any port; `*.example.com` for its subdomains; `*`
    /// for any host, for tests and mocks). Setting it replaces the
    /// default, the major browsers' push services.
    #[arg(
        long = "webpush-allowed-hosts",
        env = "CLARION_WEBPUSH_ALLOWED_HOSTS",
        default_value = clarion_proto::web_push::DEFAULT_ALLOWED_HOSTS
    )]
    pub webpush_allowed_hosts: clarion_proto::AllowedHosts,

    /// Oldest per-topic subscriber count the topics API may answer with, in seconds.
    #[arg(
        long = "topic-count-max-age-secs",
        env = "CLARION_TOPIC_COUNT_MAX_AGE_SECS",
        default_value_t = 10
    )]
    pub topic_count_max_age_secs: u64,

    /// Longest a notification's status and curve, as answered, may lag
    /// behind the database, in milliseconds: each is computed at most once
    /// per this interval per coordinator however many poll it (concurrent
    /// pollers share one computation), and a change shows within it.
    #[arg(
        long = "status-refresh-ms",
        env = "CLARION_STATUS_REFRESH_MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(1..=600_000)
    )]
    pub status_refresh_ms: u64,

    /// Memory for registrations read by `GET /api/v1/registrations/{token}`,
    /// in MiB (0: no cache, every read asks the database). A cached answer
    /// is served only while this coordinator listens to the database's
    /// change notices and has proven it is caught up with every write
    /// acknowledged before the read, by any coordinator.
    #[arg(
        long = "registration-cache-mib",
        env = "CLARION_REGISTRATION_CACHE_MIB",
        default_value_t = 64,
        value_parser = clap::value_parser!(u64).range(0..=65_536)
    )]
    pub registration_cache_mib: u64,

    /// Tokens one shard job should cover: a notification's audience is cut
    /// into about audience / this many jobs (at most 1024).
    #[arg(
        long = "tokens-per-job",
        env = "CLARION_TOKENS_PER_JOB",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tokens_per_job: u64,

    /// Milliseconds of delivery the job relay keeps released ahead of the
    /// dispatchers, at the delivery rate it measures: the queues after the
    /// relay hold about this much work, so a newly sent alert reaches its
    /// first devices after about this long however big the sends before it.
    /// Smaller overtakes sooner; too small lets the dispatchers run dry
    /// between releases.
    #[arg(
        long = "schedule-ahead-ms",
        env = "CLARION_SCHEDULE_AHEAD_MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(100..=600_000)
    )]
    pub schedule_ahead_ms: u64,

    /// Tokens per platform the job relay may keep released ahead of the
    /// dispatchers whatever the measured rate (an idle cluster has none
    /// yet): the first jobs of a send go out at once up to this much.
    #[arg(
        long = "schedule-min-tokens",
        env = "CLARION_SCHEDULE_MIN_TOKENS",
        default_value_t = 20_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub schedule_min_tokens: u64,

    /// Seconds a notification in flight may go without progress (no job or
    /// delivery report counted) before the watchdog fails it with a reason
    /// saying what never reported.
    #[arg(
        long = "stall-secs",
        env = "CLARION_STALL_SECS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub stall_secs: u64,

    /// Report messages the coordinator takes from the broker ahead of processing.
    #[arg(
        long = "reports-prefetch",
        env = "CLARION_REPORTS_PREFETCH",
        default_value_t = 64,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub reports_prefetch: u16,

    /// Largest share of a segment's pushes (iOS production, iOS sandbox,
    /// Android) refused as invalid whose registrations are still deleted.
    /// Above it Clarion suspects its own configuration (bundle id, Firebase
    /// project, APNs environment), deletes none of that segment's tokens
    /// and says so loudly.
    #[arg(
        long = "invalid-token-threshold",
        env = "CLARION_INVALID_TOKEN_THRESHOLD",
        default_value_t = 0.05,
        value_parser = parse_share
    )]
    pub invalid_token_threshold: f64,

    /// Largest share of a segment's pushes answered "gone" (uninstalled)
    /// whose registrations are still deleted. Above it the provider, or the
    /// endpoint Clarion talks to, is suspected instead of the devices.
    #[arg(
        long = "gone-token-threshold",
        env = "CLARION_GONE_TOKEN_THRESHOLD",
        default_value_t = 0.2,
        value_parser = parse_share
    )]
    pub gone_token_threshold: f64,

    #[command(flatten)]
    pub writes: WriteSettings,

    #[command(flatten)]
    pub hygiene: HygieneSettings,

    #[command(flatten)]
    pub console: ConsoleSettings,

    #[command(flatten)]
    pub database: DatabaseSettings,

    #[command(flatten)]
    pub broker: BrokerSettings,

    #[command(flatten)]
    pub tls: TlsSettings,

    #[command(flatten)]
    pub log: LogSettings,

    #[command(flatten)]
    pub otlp: OtlpSettings,

    #[command(flatten)]
    pub shutdown: ShutdownSettings,
}

impl Settings {
    pub fn topic_count_max_age(&self) -> Duration {
        Duration::from_secs(self.topic_count_max_age_secs)
    }

    /// How long a status or curve snapshot is answered from memory.
    pub fn status_refresh(&self) -> Duration {
        Duration::from_millis(self.status_refresh_ms)
    }

    /// How the job relay decides what to release.
    pub fn scheduling(&self) -> Scheduling {
        Scheduling {
            budget: Budget {
                ahead: Duration::from_millis(self.schedule_ahead_ms),
                min_tokens: self.schedule_min_tokens,
            },
            tokens_per_job: self.tokens_per_job,
        }
    }

    /// The safety valve's thresholds.
    pub fn valve(&self) -> Valve {
        Valve {
            gone: self.gone_token_threshold,
            invalid: self.invalid_token_threshold,
        }
    }

    pub fn stall(&self) -> Duration {
        Duration::from_secs(self.stall_secs)
    }

    /// The API keys to start with, and the keys file to watch when they
    /// come from one. Without keys, only `--dev` lets the coordinator start.
    pub fn initial_keys(&self) -> Result<InitialKeys, String> {
        if let Some(keys) = &self.api_keys {
            return Ok(InitialKeys::Listed(keys.clone()));
        }
        if let Some(path) = &self.api_keys_file {
            let (keys, text) = file::load(path)?;
            return Ok(InitialKeys::File {
                path: path.clone(),
                keys,
                text,
            });
        }
        if self.dev {
            return Ok(InitialKeys::Development(KeySet::development(DEV_API_KEY)));
        }
        Err(NO_KEYS.to_owned())
    }

    pub fn api_keys_file_poll(&self) -> Duration {
        Duration::from_secs(self.api_keys_file_poll_secs)
    }
}

/// Where the API keys come from.
#[derive(Debug)]
pub enum InitialKeys {
    /// `CLARION_API_KEYS`.
    Listed(KeySet),
    /// `CLARION_API_KEYS_FILE`, with the text read (to notice changes).
    File {
        path: PathBuf,
        keys: KeySet,
        text: String,
    },
    /// `--dev`: the development key only.
    Development(KeySet),
}

/// Data hygiene: the stale-registration purge and the retention of
/// notifications' detail rows, run on a schedule by one replica at a time.
#[derive(Debug, Clone, clap::Args)]
pub struct HygieneSettings {
    /// Days a device may go without re-registering (a PUT of its
    /// registration, or a topic followed) before all its registrations are
    /// purged; 0 never purges.
    #[arg(
        long = "registration-max-age-days",
        env = "CLARION_REGISTRATION_MAX_AGE_DAYS",
        default_value_t = 270,
        value_parser = clap::value_parser!(u32).range(0..=36_500)
    )]
    pub registration_max_age_days: u32,

    /// Days a finished notification (complete, failed, cancelled) keeps its
    /// detail rows (per batch, per job, accept times, held tokens) after its
    /// last activity; its summary and status stay. 0 keeps them for ever.
    #[arg(
        long = "notification-detail-retention-days",
        env = "CLARION_NOTIFICATION_DETAIL_RETENTION_DAYS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u32).range(0..=36_500)
    )]
    pub notification_detail_retention_days: u32,

    /// Seconds between two hygiene runs (the first comes 30 s after start,
    /// or sooner if this is shorter), at most 30 days; 0 turns both off. A
    /// run stops while a send is going on and carries on a minute later.
    #[arg(
        long = "hygiene-interval-secs",
        env = "CLARION_HYGIENE_INTERVAL_SECS",
        default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(0..=2_592_000)
    )]
    pub interval_secs: u64,

    /// Most rows one hygiene statement deletes (each is its own short
    /// transaction).
    #[arg(
        long = "hygiene-batch-size",
        env = "CLARION_HYGIENE_BATCH_SIZE",
        default_value_t = 5000,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub batch_size: u32,
}

/// The group commit of the app-facing writes (registrations, receipts):
/// each kind has its own queue and workers with these bounds.
#[derive(Debug, Clone, clap::Args)]
pub struct WriteSettings {
    /// Longest a write waits, in milliseconds, for others to join its
    /// batch once a batch worker has taken it (0: only those already
    /// waiting join; batches still fill by themselves while every batch
    /// worker is busy, and measured faster than 2 ms on a local disk: a
    /// wait pays where a commit's flush is slow).
    #[arg(
        long = "write-batch-wait-ms",
        env = "CLARION_WRITE_BATCH_WAIT_MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=100)
    )]
    pub batch_wait_ms: u64,

    /// Most rows one batch transaction writes: a registration counts its
    /// topics, a receipts request its receipts (a batch always takes at
    /// least one request, so 500 receipts may form a batch alone).
    #[arg(
        long = "write-batch-max-rows",
        env = "CLARION_WRITE_BATCH_MAX_ROWS",
        default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub batch_max_rows: u32,

    /// Most rows, per kind, waiting for a batch or being written; a write
    /// beyond it is answered 503 with Retry-After at once (memory stays
    /// bounded by it).
    #[arg(
        long = "write-queue-rows",
        env = "CLARION_WRITE_QUEUE_ROWS",
        default_value_t = 16_384,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub queue_rows: u32,

    /// Batch transactions at once, per kind (default: a quarter of
    /// CLARION_DATABASE_POOL_SIZE, at least 1, so both kinds together hold
    /// at most half the pool and the send path keeps the rest).
    #[arg(
        long = "write-batches-in-flight",
        env = "CLARION_WRITE_BATCHES_IN_FLIGHT",
        value_parser = clap::value_parser!(u32).range(1..=250)
    )]
    pub batches_in_flight: Option<u32>,
}

/// Longest one write batch may take before it is rolled back and its
/// requests answered 503: the database is stuck, the apps retry later.
const WRITE_BATCH_DEADLINE: Duration = Duration::from_secs(10);

impl WriteSettings {
    /// The bounds of each kind's group commit, for a database pool of
    /// `pool_size` connections.
    pub fn bounds(&self, pool_size: u32) -> Bounds {
        let in_flight = self.batches_in_flight.unwrap_or(pool_size / 4).max(1);
        Bounds {
            queue_rows: self.queue_rows as usize,
            batch_rows: self.batch_max_rows as usize,
            wait: Duration::from_millis(self.batch_wait_ms),
            in_flight: in_flight as usize,
            batch_deadline: WRITE_BATCH_DEADLINE,
        }
    }
}

/// The newsroom console at `/console/`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleSettings {
    /// A console send to more devices than this asks the editor to type the
    /// audience size (or the topic) to confirm.
    #[arg(
        long = "console-confirm-above",
        env = "CLARION_CONSOLE_CONFIRM_ABOVE",
        default_value_t = 100_000
    )]
    pub confirm_above: u64,

    /// Hours a console sign-in lasts (1 to 720).
    #[arg(
        long = "console-session-hours",
        env = "CLARION_CONSOLE_SESSION_HOURS",
        default_value_t = 12,
        value_parser = clap::value_parser!(u32).range(1..=720)
    )]
    pub session_hours: u32,

    /// Link from a notification's console page to its trace, with
    /// `{trace_id}` where the trace id goes, e.g.
    /// `https://jaeger.example/trace/{trace_id}`. No link when unset.
    #[arg(
        long = "trace-url-template",
        env = "CLARION_TRACE_URL_TEMPLATE",
        value_parser = parse_trace_url_template
    )]
    pub trace_url_template: Option<String>,
}

fn parse_trace_url_template(template: &str) -> Result<String, String> {
    let scheme_ok = template.starts_with("https://") || template.starts_with("http://");
    if !scheme_ok || !template.contains("{trace_id}") {
        return Err(format!(
            "expected an http(s) URL holding {{trace_id}}, e.g. https://jaeger.example/trace/{{trace_id}}; got {template:?}"
        ));
    }
    Ok(template.to_owned())
}

/// Longest a hygiene run goes on; the next one carries on where it stopped.
const HYGIENE_RUN_BUDGET: Duration = Duration::from_secs(300);

impl HygieneSettings {
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_secs)
    }

    pub fn plan(&self) -> HygienePlan {
        let days = |days: u32| (days > 0).then(|| Duration::from_secs(u64::from(days) * 86_400));
        HygienePlan {
            registration_max_age: days(self.registration_max_age_days),
            detail_retention: days(self.notification_detail_retention_days),
            batch: self.batch_size,
            budget: HYGIENE_RUN_BUDGET,
            yield_to_sends: true,
        }
    }
}

fn parse_share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{value:?} is not a share between 0 and 1")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Settings::command().debug_assert();
    }

    #[test]
    fn hygiene_defaults_and_zero_turns_each_part_off() {
        use clap::Parser;
        use std::time::Duration;
        let day = Duration::from_secs(86_400);
        let defaults = super::Settings::try_parse_from(["clarion-coordinator"]).unwrap();
        let plan = defaults.hygiene.plan();
        assert_eq!(plan.registration_max_age, Some(day * 270));
        assert_eq!(plan.detail_retention, Some(day * 30));
        assert_eq!(plan.batch, 5000);
        assert_eq!(defaults.hygiene.interval(), Duration::from_secs(3600));
        let off = super::Settings::try_parse_from([
            "clarion-coordinator",
            "--registration-max-age-days=0",
            "--notification-detail-retention-days=0",
        ])
        .unwrap();
        assert!(off.hygiene.plan().is_idle());
        assert!(super::Settings::try_parse_from(["clarion-coordinator", "--hygiene-batch-size=0"]).is_err());
    }

    fn parse(args: &[&str]) -> Result<super::Settings, clap::Error> {
        use clap::Parser;
        super::Settings::try_parse_from(std::iter::once("clarion-coordinator").chain(args.iter().copied()))
    }

    #[test]
    fn without_keys_only_dev_mode_starts() {
        let err = parse(&[]).unwrap().initial_keys().unwrap_err();
        assert!(err.contains("CLARION_API_KEYS") && err.contains("--dev"), "{err}");
        let dev = parse(&["--dev"]).unwrap().initial_keys().unwrap();
        assert!(
            matches!(dev, super::InitialKeys::Development(keys) if keys.identify("dev-admin-key").is_some())
        );
        let listed = parse(&["--api-keys=k=send"]).unwrap().initial_keys().unwrap();
        assert!(
            matches!(listed, super::InitialKeys::Listed(keys) if keys.identify("dev-admin-key").is_none())
        );
    }

    #[test]
    fn write_batches_take_a_quarter_of_the_pool_unless_told() {
        let defaults = parse(&[]).unwrap().writes;
        assert_eq!(defaults.bounds(16).in_flight, 4);
        assert_eq!(defaults.bounds(2).in_flight, 1);
        assert_eq!(defaults.bounds(16).wait, std::time::Duration::from_millis(0));
        let told = parse(&["--write-batches-in-flight=3"]).unwrap().writes;
        assert_eq!(told.bounds(16).in_flight, 3);
        assert!(parse(&["--write-queue-rows=0"]).is_err());
    }

    #[test]
    fn both_roles_unless_told_and_a_wrong_role_stops_the_start() {
        use crate::role::{Role, Roles};
        assert_eq!(parse(&[]).unwrap().roles, Roles::BOTH);
        assert_eq!(parse(&["--role=api"]).unwrap().roles, Roles::only(Role::Api));
        assert_eq!(
            parse(&["--role", "control"]).unwrap().roles,
            Roles::only(Role::Control)
        );
        assert_eq!(parse(&["--role=control,api"]).unwrap().roles, Roles::BOTH);
        // The last --role wins, as for every setting.
        assert_eq!(
            parse(&["--role=api", "--role=control"]).unwrap().roles,
            Roles::only(Role::Control)
        );
        let err = parse(&["--role=apis"]).unwrap_err().to_string();
        assert!(err.contains("unknown role \"apis\""), "{err}");
    }

    #[test]
    fn keys_and_a_keys_file_are_exclusive() {
        assert!(parse(&["--api-keys=k=send", "--api-keys-file=/nonexistent"]).is_err());
    }
}
