//! Bulk-loading a synthetic audience with `COPY` (never row-by-row INSERTs).
//!
//! A fresh load drops the registrations indexes, copies the rows in and
//! builds the indexes afterwards: sorting once is far cheaper than keeping
//! B-trees ordered through millions of random inserts. The indexes are
//! rebuilt from their own definitions, read from the catalogue before they
//! are dropped, so a seeded table has exactly the keys the migrations made
//! (a key written out here went stale once: it lacked V35's `kind`, and
//! every benchmark's harvest read the heap). The load is one transaction:
//! interrupted, it leaves the table as it was.

use std::pin::pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::{BufMut, BytesMut};
use clarion_proto::{Platform, shard_of};
use futures::SinkExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio_postgres::{Client, NoTls};

use crate::audience::{AudienceShape, device};
use crate::mocks::webpush::seeded::SeededKeys;

/// Bytes buffered before a chunk goes to the server.
const CHUNK_BYTES: usize = 1 << 20;

/// What to load.
#[derive(Debug, Clone)]
pub struct SeedPlan {
    pub devices: u64,
    pub shape: AudienceShape,
    /// Replace whatever registrations exist (and rebuild the indexes once).
    pub fresh: bool,
    /// How many apps get an audience of `devices` each (devices of their
    /// own): `default`, then [`app_id`] 1, 2, …
    pub apps: u32,
    /// Every device's registration says `receipts: true` (the demo's phones
    /// all report).
    pub receipts: bool,
}

/// The id of the `index`th app of a seeded installation: `default`, then
/// `app2`, `app3`, …
pub fn app_id(index: u32) -> String {
    if index == 0 {
        clarion_proto::DEFAULT_APP.to_owned()
    } else {
        format!("app{}", index + 1)
    }
}

/// What was loaded.
#[derive(Debug, Clone, Copy)]
pub struct SeedReport {
    pub devices: u64,
    pub rows: u64,
    pub elapsed: Duration,
}

pub async fn connect(url: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.with_context(|| {
        format!(
            "connecting to {} (on a new machine, `./scripts/demo` or `./scripts/test` starts \
                 PostgreSQL and creates the `clarion` role once)",
            redact(url)
        )
    })?;
    tokio::spawn(connection);
    Ok(client)
}

/// Loads `plan.devices` devices; shows a progress bar when `progress`.
pub async fn seed(client: &Client, plan: &SeedPlan, progress: bool) -> Result<SeedReport> {
    let started = Instant::now();
    client.batch_execute("BEGIN").await.context("starting the load")?;
    let indexes = if plan.fresh {
        let indexes = RegistrationsIndexes::read(client).await?;
        client
            .batch_execute(&format!(
                "TRUNCATE registrations, web_subscriptions; {}",
                indexes.drop_sql()
            ))
            .await
            .context("preparing registrations for a bulk load")?;
        Some(indexes)
    } else {
        None
    };
    let bar = if progress {
        ProgressBar::new(plan.devices)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "seeding  {bar:40.cyan/blue} {human_pos}/{human_len} devices ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let sink = client
        .copy_in(
            "COPY registrations (app, topic, shard, token, platform, apns_environment, locale, receipts) FROM STDIN",
        )
        .await
        .context("starting COPY")?;
    let mut sink = pin!(sink);
    let mut buffer = BytesMut::with_capacity(CHUNK_BYTES + 4096);
    let mut rows = 0u64;
    let apps = plan.apps.max(1);
    bar.set_length(plan.devices * u64::from(apps));
    for app_index in 0..apps {
        let app = app_id(app_index);
        // Each app's devices are devices of their own.
        let first = u64::from(app_index) * plan.devices;
        for n in first..first + plan.devices {
            let device = device(n, plan.shape);
            let shard = shard_of(&device.token);
            for topic in &device.topics {
                buffer.put_slice(app.as_bytes());
                buffer.put_u8(b'\t');
                buffer.put_slice(topic.as_bytes());
                buffer.put_u8(b'\t');
                buffer.put_slice(shard.to_string().as_bytes());
                buffer.put_u8(b'\t');
                buffer.put_slice(device.token.as_bytes());
                buffer.put_u8(b'\t');
                buffer.put_slice(device.platform.as_str().as_bytes());
                buffer.put_slice(b"\tproduction\t");
                buffer.put_slice(device.locale.unwrap_or("\\N").as_bytes());
                buffer.put_slice(if plan.receipts { b"\tt\n" } else { b"\tf\n" });
                rows += 1;
            }
            if buffer.len() >= CHUNK_BYTES {
                sink.send(buffer.split().freeze()).await.context("COPY")?;
                bar.set_position(n + 1);
            }
        }
    }
    sink.send(buffer.split().freeze()).await.context("COPY")?;
    sink.as_mut().finish().await.context("finishing COPY")?;
    bar.finish();
    if let Some(indexes) = indexes {
        if progress {
            eprintln!("building indexes over {rows} rows");
        }
        client
            .batch_execute(&indexes.build_sql())
            .await
            .context("rebuilding the registrations indexes")?;
    }
    client
        .batch_execute("COMMIT")
        .await
        .context("committing the load")?;
    // What autovacuum does to a live table: statistics, and the visibility
    // map that lets the harvest query scan the primary key alone.
    client
        .batch_execute("VACUUM (ANALYZE) registrations")
        .await
        .context("vacuuming registrations")?;
    Ok(SeedReport {
        devices: plan.devices * u64::from(apps),
        rows,
        elapsed: started.elapsed(),
    })
}

/// The indexes of `registrations` (its primary key among them) as the
/// catalogue defines them, to drop before a bulk load and build after it.
struct RegistrationsIndexes {
    /// `pg_get_constraintdef` of the primary key.
    primary_key: String,
    /// Name and `pg_get_indexdef` of every other index.
    others: Vec<(String, String)>,
}

impl RegistrationsIndexes {
    async fn read(client: &Client) -> Result<Self> {
        let primary_key = client
            .query_opt(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint
                  WHERE conrelid = 'registrations'::regclass AND conname = 'registrations_pkey'",
                &[],
            )
            .await
            .context("reading the registrations primary key")?
            .context("registrations has no primary key `registrations_pkey`: the database was not made by the migrations")?
            .get(0);
        let others = client
            .query(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid)
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                  WHERE i.indrelid = 'registrations'::regclass AND NOT i.indisprimary
                  ORDER BY c.relname",
                &[],
            )
            .await
            .context("reading the registrations indexes")?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        Ok(Self { primary_key, others })
    }

    fn drop_sql(&self) -> String {
        let mut sql = String::from("ALTER TABLE registrations DROP CONSTRAINT registrations_pkey;");
        for (name, _) in &self.others {
            sql.push_str(&format!(" DROP INDEX \"{name}\";"));
        }
        sql
    }

    fn build_sql(&self) -> String {
        let mut sql = format!(
            "ALTER TABLE registrations ADD CONSTRAINT registrations_pkey {};",
            self.primary_key
        );
        for (_, definition) in &self.others {
            sql.push_str(&format!(" {definition};"));
        }
        sql
    }
}

/// Writes the subscriptions of `plan`'s browsers (its devices on
/// [`Platform::Web`]) as seeded browsers of the mock push service at
/// `origin` ([`SeededKeys`]), replacing any there: a push service's port
/// changes from run to run, so a run whose registrations are reused writes
/// them again. Returns how many were written.
pub async fn seed_web_subscriptions(client: &Client, plan: &SeedPlan, origin: &str) -> Result<u64> {
    client
        .batch_execute("TRUNCATE web_subscriptions")
        .await
        .context("clearing web subscriptions")?;
    if plan.shape.web_percent == 0 {
        return Ok(0);
    }
    let keys = SeededKeys::get()?;
    let sink = client
        .copy_in("COPY web_subscriptions (app, token, subscription) FROM STDIN")
        .await
        .context("starting COPY of web subscriptions")?;
    let mut sink = pin!(sink);
    let mut buffer = BytesMut::with_capacity(CHUNK_BYTES + 4096);
    let mut written = 0u64;
    for app_index in 0..plan.apps.max(1) {
        let app = app_id(app_index);
        let first = u64::from(app_index) * plan.devices;
        for n in first..first + plan.devices {
            let device = device(n, plan.shape);
            if device.platform != Platform::Web {
                continue;
            }
            // The JSON has no tab, newline or backslash: COPY's text form as is.
            let subscription = keys.subscription(origin, &device.token).json();
            buffer.put_slice(app.as_bytes());
            buffer.put_u8(b'\t');
            buffer.put_slice(device.token.as_bytes());
            buffer.put_u8(b'\t');
            buffer.put_slice(subscription.to_string().as_bytes());
            buffer.put_u8(b'\n');
            written += 1;
            if buffer.len() >= CHUNK_BYTES {
                sink.send(buffer.split().freeze()).await.context("COPY")?;
            }
        }
    }
    sink.send(buffer.split().freeze()).await.context("COPY")?;
    sink.as_mut()
        .finish()
        .await
        .context("finishing COPY of web subscriptions")?;
    client
        .batch_execute("ANALYZE web_subscriptions")
        .await
        .context("analysing web subscriptions")?;
    Ok(written)
}

/// A URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Drops the database `url` names if it exists, creates it and migrates
/// it: a benchmark's own database starts from the migrations' keys.
pub async fn recreate_database(url: &str) -> Result<()> {
    let (server, name) = url
        .rsplit_once('/')
        .context("the database URL names no database")?;
    let name = name.split('?').next().unwrap_or(name);
    if name.is_empty() || name.contains('"') {
        bail!("unexpected database name {name:?}");
    }
    let admin = connect(&format!("{server}/postgres")).await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .with_context(|| format!("dropping {name}"))?;
    prepare_database(url).await
}

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

#[cfg(test)]
mod tests {
    use clarion_harvester::harvest::ONE_TOPIC;
    use clarion_runtime::testing::TestDatabase;

    use super::*;
    use crate::audience::Layout;

    /// The registrations indexes: name and definition, sorted.
    async fn indexes(client: &Client) -> Vec<(String, String)> {
        client
            .query(
                "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index
                  WHERE indrelid = 'registrations'::regclass ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    /// A fresh load ends with the keys the migrations made, and the alert
    /// harvest reads the primary key alone (no heap fetch), as it does in
    /// production: the benchmarks measure the harvest operators run.
    #[tokio::test]
    async fn a_fresh_load_keeps_the_migrations_keys_and_an_index_only_harvest() {
        let db = TestDatabase::create().await;
        clarion_coordinator::migrations::run(&db.url).await.unwrap();
        let client = db.client().await;
        let migrated = indexes(&client).await;
        assert!(
            migrated
                .iter()
                .any(|(name, definition)| name == "registrations_pkey"
                    && definition.contains("INCLUDE (platform, apns_environment, locale, kind)")),
            "{migrated:?}"
        );
        let plan = SeedPlan {
            devices: 2_000,
            shape: AudienceShape {
                web_percent: 0,
                ios_percent: 50,
                dead_percent: 0,
                layout: Layout::Single,
                locales: 0,
            },
            fresh: true,
            apps: 1,
            receipts: false,
        };
        for _ in 0..2 {
            let report = seed(&client, &plan, false).await.unwrap();
            assert_eq!(report.rows, 2_000);
            assert_eq!(indexes(&client).await, migrated);
        }

        let plan: Vec<String> = client
            .query(
                &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {ONE_TOPIC}"),
                &[&"breaking/uk", &0i16, &1024i16, &"default"],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("Index Only Scan using registrations_pkey"),
            "{plan}"
        );
        assert!(plan.contains("Heap Fetches: 0"), "{plan}");
        assert!(plan.contains("rows=2000"), "{plan}");
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}

/// `clarion-bench seed`: load an audience into a database.
#[derive(Debug, clap::Args)]
pub struct SeedArgs {
    /// Devices to load.
    #[arg(long, default_value_t = 1_000_000)]
    pub devices: u64,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub ios_percent: u8,
    /// Share of dead tokens (the mocks answer them as gone), in percent.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub dead_percent: u8,
    /// `news`: four overlapping topics; `single`: everyone on breaking/uk.
    #[arg(long, value_enum, default_value_t = crate::audience::Layout::News)]
    pub layout: crate::audience::Layout,
    /// Add to the registrations already there instead of replacing them
    /// (without it the database is dropped, created and migrated afresh).
    #[arg(long)]
    pub append: bool,

    /// How many of the locales en-GB, fr, fr-CA, de the devices carry (0: none).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    pub locales: u8,
    /// Apps (`default`, `app2`, …), each with `--devices` devices of its own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub apps: u32,
    #[arg(
        long,
        env = "CLARION_BENCH_DATABASE_URL",
        default_value = "postgres://clarion:clarion@127.0.0.1:5432/clarion_bench"
    )]
    pub database_url: String,
}

pub async fn run(args: SeedArgs) -> Result<()> {
    if args.append {
        prepare_database(&args.database_url).await?;
    } else {
        recreate_database(&args.database_url).await?;
    }
    let client = connect(&args.database_url).await?;
    let plan = SeedPlan {
        devices: args.devices,
        shape: AudienceShape {
            web_percent: 0,
            ios_percent: args.ios_percent,
            dead_percent: args.dead_percent,
            layout: args.layout,
            locales: args.locales,
        },
        fresh: !args.append,
        apps: args.apps,
        receipts: false,
    };
    let report = seed(&client, &plan, true).await?;
    println!(
        "loaded {} devices ({} registrations) in {:.1} s ({:.0} rows/s)",
        report.devices,
        report.rows,
        report.elapsed.as_secs_f64(),
        report.rows as f64 / report.elapsed.as_secs_f64().max(1e-9)
    );
    Ok(())
}
