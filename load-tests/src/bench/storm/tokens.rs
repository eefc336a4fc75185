//! The storm's devices: the send's audience (the seeded devices of the
//! lowest shards, also registered on [`SEND_TOPIC`] and reporting
//! receipts), and the token pools the loads draw from, computed from the
//! same deterministic audience the seeder wrote (no query per token).

use anyhow::{Context, Result};
use clarion_proto::{Platform, SHARD_SPACE, shard_of};

use super::requests::{CHANGED_TOPICS, NEW_TOPICS};
use crate::audience::{AudienceShape, device};
use crate::seed::connect;

/// The topic the storm's send goes to.
pub const SEND_TOPIC: &str = "storm/send";

/// Tokens the loads use, prepared before the phases.
#[derive(Debug, Default)]
pub struct TokenPools {
    /// Registered tokens the reads pick from at random: devices of the
    /// send's audience, which no write changes (a changed device leaves the
    /// database with the writes' registrations at the end, so a later
    /// `--reuse` run reading it would get 404s).
    pub reads: Vec<String>,
    /// Seeded devices outside the send's audience, whose topics the writes
    /// change (so the send's audience stays the same).
    pub changed: Vec<(String, Platform)>,
    /// Devices of the send's audience, for receipts.
    pub receipts: Vec<String>,
}

/// How many of each pool to prepare.
#[derive(Debug, Clone, Copy)]
pub struct PoolSizes {
    pub reads: usize,
    pub changed: usize,
    pub receipts: usize,
}

/// The first shard outside the send's audience: devices of shards below it
/// follow [`SEND_TOPIC`], about `send_devices` of `devices` (shards are a
/// uniform hash of the token).
pub fn shard_cutoff(devices: u64, send_devices: u64) -> u16 {
    if devices == 0 {
        return 0;
    }
    let share = send_devices.min(devices) as f64 / devices as f64;
    (share * f64::from(SHARD_SPACE)).round() as u16
}

/// The pools, from the first `devices` devices of `shape` (CPU work: a
/// hash a device, about a second for a million).
pub fn pools(devices: u64, shape: AudienceShape, cutoff: u16, sizes: PoolSizes) -> TokenPools {
    let mut pools = TokenPools::default();
    for n in 0..devices {
        let full = pools.reads.len() >= sizes.reads
            && pools.changed.len() >= sizes.changed
            && pools.receipts.len() >= sizes.receipts;
        if full {
            break;
        }
        let device = device(n, shape);
        let in_send = shard_of(&device.token) < cutoff;
        if in_send && pools.receipts.len() < sizes.receipts {
            pools.receipts.push(device.token.clone());
        }
        if !in_send && pools.changed.len() < sizes.changed {
            pools.changed.push((device.token.clone(), device.platform));
        }
        if in_send && pools.reads.len() < sizes.reads {
            pools.reads.push(device.token);
        }
    }
    pools
}

/// Registers the seeded devices of shards below `cutoff` on [`SEND_TOPIC`]
/// as reporting receipts (kept when already so); returns their number.
pub async fn prepare_send_topic(database_url: &str, seeded_topic: &str, cutoff: u16) -> Result<u64> {
    let client = connect(database_url).await?;
    let cutoff = cutoff as i16;
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE topic = $1 AND shard < $3),
                    count(*) FILTER (WHERE topic = $2),
                    count(*) FILTER (WHERE topic = $2 AND receipts AND shard < $3)
               FROM registrations WHERE app = 'default' AND topic IN ($1, $2)",
            &[&seeded_topic, &SEND_TOPIC, &cutoff],
        )
        .await
        .context("counting the send's audience")?;
    let (wanted, there, there_reporting): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let wanted = wanted.max(0) as u64;
    if (there, there_reporting) == (wanted as i64, wanted as i64) {
        println!("topic {SEND_TOPIC}: {wanted} devices (kept)");
        return Ok(wanted);
    }
    client
        .execute(
            "DELETE FROM registrations WHERE app = 'default' AND topic = $1",
            &[&SEND_TOPIC],
        )
        .await?;
    let added = client
        .execute(
            "INSERT INTO registrations (app, topic, shard, token, platform, apns_environment, locale, receipts)
             SELECT app, $3, shard, token, platform, apns_environment, locale, true FROM registrations
              WHERE app = 'default' AND topic = $1 AND shard < $2",
            &[&seeded_topic, &cutoff, &SEND_TOPIC],
        )
        .await
        .with_context(|| format!("registering the send's audience on {SEND_TOPIC}"))?;
    client
        .batch_execute("VACUUM (ANALYZE) registrations")
        .await
        .context("vacuuming registrations")?;
    println!("topic {SEND_TOPIC}: {added} devices, reporting receipts");
    Ok(added)
}

/// Deletes what the writes registered (new tokens, changed tokens' second
/// topics), so a `--reuse` run finds the database as seeded.
pub async fn clean_up(database_url: &str) -> Result<u64> {
    let client = connect(database_url).await?;
    let topics: Vec<&str> = NEW_TOPICS.iter().chain(&CHANGED_TOPICS).copied().collect();
    let deleted = client
        .execute(
            "DELETE FROM registrations WHERE app = 'default' AND topic = ANY($1)",
            &[&topics],
        )
        .await
        .context("deleting the storm's registrations")?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audience::Layout;

    #[test]
    fn the_cutoff_takes_the_send_share_of_the_shards() {
        assert_eq!(shard_cutoff(2_000_000, 1_000_000), SHARD_SPACE / 2);
        assert_eq!(shard_cutoff(50_000, 20_000), 410);
        assert_eq!(shard_cutoff(10, 50), SHARD_SPACE);
        assert_eq!(shard_cutoff(0, 50), 0);
    }

    #[test]
    fn pools_split_the_audience_at_the_cutoff() {
        let shape = AudienceShape {
            web_percent: 0,
            ios_percent: 50,
            dead_percent: 0,
            layout: Layout::Single,
            locales: 0,
        };
        let sizes = PoolSizes {
            reads: 100,
            changed: 50,
            receipts: 50,
        };
        let cutoff = shard_cutoff(1_000, 500);
        let pools = pools(1_000, shape, cutoff, sizes);
        assert_eq!(
            (pools.reads.len(), pools.changed.len(), pools.receipts.len()),
            (100, 50, 50)
        );
        assert!(pools.receipts.iter().all(|token| shard_of(token) < cutoff));
        // Reads never meet a device the writes change (and delete at the end).
        assert!(pools.reads.iter().all(|token| shard_of(token) < cutoff));
        assert!(pools.changed.iter().all(|(token, _)| shard_of(token) >= cutoff));
        assert!(
            pools
                .changed
                .iter()
                .any(|(_, platform)| *platform == Platform::Android)
        );
    }
}
