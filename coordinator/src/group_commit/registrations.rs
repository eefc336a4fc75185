//! The registration writes the group commit batches: a device's topic set
//! replaced (`PUT`), one topic followed or dropped, the device forgotten.
//! A batch applies them sorted by (app, token), in rounds (one write per
//! token each), so writes of one token keep their arrival order and
//! concurrent batches lock tokens in one order; a round is applied
//! set-based, a fixed number of statements for all its writes.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use clarion_proto::Platform;

use crate::store::StoreError;
use crate::store::registrations::{
    self as store, Device, DeviceKey, RowTimes, RowsToStore, StoredRegistration,
};

use super::write::{BatchContext, BatchWrite};
use crate::store::prepared::Prepared;

/// One registration write.
#[derive(Debug, Clone)]
pub struct RegistrationWrite {
    pub app: String,
    pub token: String,
    pub change: Change,
}

/// What a registration write does.
#[derive(Debug, Clone)]
pub enum Change {
    /// Replace the topic set (create the registration if new).
    Replace { device: Device, topics: Vec<String> },
    /// Follow one more topic (the registration must exist).
    AddTopic { topic: String, max_topics: u32 },
    /// Stop following one topic.
    RemoveTopic { topic: String },
    /// Forget the device.
    Delete,
}

/// What a registration write did.
#[derive(Debug)]
pub enum Written {
    /// The registration as stored after the write (boxed: it is far
    /// larger than a count).
    Stored(Box<StoredRegistration>),
    /// Rows removed.
    Removed(u64),
}

impl BatchWrite for RegistrationWrite {
    type Output = Written;
    type Key = (String, String);
    const KIND: &'static str = "registrations";

    /// The rows it writes: its topics for a replacement, else one.
    fn rows(&self) -> usize {
        match &self.change {
            Change::Replace { topics, .. } => topics.len().max(1),
            _ => 1,
        }
    }

    fn order_key(&self) -> Self::Key {
        (self.app.clone(), self.token.clone())
    }

    async fn apply_round(
        writes: &[&Self],
        tx: &Prepared<'_>,
        _batch: BatchContext,
    ) -> Result<Vec<Written>, StoreError> {
        apply_round(writes, tx).await
    }
}

/// One round (one write per device, sorted by device) in at most nine
/// statements whatever its size: the devices' locks; the devices gaining
/// a topic read (their refusals decided before anything is written); the
/// devices' change notices (the read caches', sent at commit); the
/// devices forgotten; the topics dropped; the topics no longer in a
/// replaced set; the rows inserted or refreshed, which return their
/// times; the web subscriptions stored and forgotten. A statement for a
/// kind of write the round lacks is not sent (a round of `PUT`s: five,
/// with the web subscriptions forgotten). The stored registrations are
/// answered from what was written (and, for a topic followed, the device
/// read before), not read back: the device's lock holds its rows against
/// every other registration write meanwhile. Hygiene's purge and the
/// provider's invalid-token deletions take no such lock: one committed
/// between a followed topic's read and the commit leaves that answer
/// naming the deleted topics, rare and harmless (the next read is right;
/// a read-back after the upsert had the same window, shorter).
///
/// The statements are sent together (pipelined), in that order, which
/// PostgreSQL keeps: one wait for all of them, except the read of the
/// devices gaining a topic, which the others wait for. A statement that
/// fails fails the round (the others then fail with it, the transaction
/// being aborted).
async fn apply_round(writes: &[&RegistrationWrite], tx: &Prepared<'_>) -> Result<Vec<Written>, StoreError> {
    let devices: Vec<DeviceKey<'_>> = writes.iter().map(|write| device_of(write)).collect();
    let gaining: Vec<DeviceKey<'_>> = writes
        .iter()
        .filter(|write| matches!(write.change, Change::AddTopic { .. }))
        .map(|write| device_of(write))
        .collect();
    let mut locked = false;
    let current = if gaining.is_empty() {
        HashMap::new()
    } else {
        locked = true;
        let (_, current) = futures::try_join!(
            store::lock_devices(tx, &devices),
            store::read_devices(tx, &gaining)
        )?;
        current
    };
    let mut replaced = RowsToStore::default();
    let mut rows = RowsToStore::default();
    // What each replacement or followed topic stores, but its times.
    let mut answers: Vec<Option<StoredRegistration>> = Vec::with_capacity(writes.len());
    let mut forgotten = Vec::new();
    let mut dropped = Vec::new();
    let mut subscriptions = Vec::new();
    for write in writes {
        let (app, token) = device_of(write);
        match &write.change {
            Change::Replace { device, topics } => {
                let mut seen = HashSet::with_capacity(topics.len());
                for topic in topics.iter().filter(|topic| seen.insert(topic.as_str())) {
                    replaced.push(app, token, topic, device);
                    rows.push(app, token, topic, device);
                }
                subscriptions.push(((app, token), device.subscription.as_ref()));
                answers.push(Some(replacement(app, token, device, seen.into_iter())));
            }
            Change::AddTopic { topic, max_topics } => {
                let current = current
                    .get(&(app.to_owned(), token.to_owned()))
                    .ok_or(StoreError::UnknownToken)?;
                let is_new = !current.topics.iter().any(|t| t == topic);
                if is_new && current.topics.len() >= *max_topics as usize {
                    return Err(StoreError::TooManyTopics { limit: *max_topics });
                }
                let device = Device {
                    platform: current.platform,
                    environment: current.environment,
                    locale: current.locale.clone(),
                    receipts: current.receipts,
                    subscription: current.subscription.clone(),
                    kind: current.kind,
                    attributes_type: current.attributes_type.clone(),
                };
                rows.push(app, token, topic, &device);
                let mut stored = current.clone();
                if is_new {
                    stored.topics.push(topic.clone());
                    stored.topics.sort_unstable();
                }
                answers.push(Some(stored));
            }
            Change::RemoveTopic { topic } => {
                dropped.push((app, token, topic.as_str()));
                answers.push(None);
            }
            Change::Delete => {
                forgotten.push((app, token));
                answers.push(None);
            }
        }
    }
    let (_, _, forgotten, dropped, _, times, _) = futures::try_join!(
        async {
            match locked {
                true => Ok(()),
                false => store::lock_devices(tx, &devices).await,
            }
        },
        // Before the writes, whose trigger looks for it.
        store::announce(tx, &devices),
        async {
            match forgotten.is_empty() {
                true => Ok(HashMap::new()),
                false => store::delete_devices(tx, &forgotten).await,
            }
        },
        async {
            match dropped.is_empty() {
                true => Ok(HashSet::new()),
                false => store::remove_topics(tx, &dropped).await,
            }
        },
        async {
            match replaced.is_empty() {
                true => Ok(()),
                false => store::delete_topics_not_in(tx, &replaced).await,
            }
        },
        async {
            match rows.is_empty() {
                true => Ok(HashMap::new()),
                false => store::store_rows(tx, &rows).await,
            }
        },
        async {
            match subscriptions.is_empty() {
                true => Ok(()),
                false => store::store_subscriptions(tx, &subscriptions).await,
            }
        },
    )?;
    writes
        .iter()
        .zip(answers)
        .map(|(write, answer)| {
            let key = (write.app.clone(), write.token.clone());
            Ok(match (&write.change, answer) {
                (Change::RemoveTopic { .. }, _) => Written::Removed(u64::from(dropped.contains(&key))),
                (Change::Delete, _) => Written::Removed(forgotten.get(&key).copied().unwrap_or(0)),
                (_, Some(mut stored)) => {
                    // A replacement is all its rows; a followed topic,
                    // the rows read before and the one written.
                    let written = times.get(&key).ok_or(StoreError::UnknownToken)?;
                    let times = match &write.change {
                        Change::AddTopic { .. } => written.and(RowTimes {
                            created_at: stored.created_at,
                            updated_at: stored.updated_at,
                        }),
                        _ => *written,
                    };
                    stored.created_at = times.created_at;
                    stored.updated_at = times.updated_at;
                    Written::Stored(Box::new(stored))
                }
                (_, None) => return Err(StoreError::UnknownToken),
            })
        })
        .collect()
}

/// The registration a replacement stores, but its times (set from the
/// rows written): its topics sorted byte by byte, as a read returns them.
fn replacement<'a>(
    app: &str,
    token: &str,
    device: &Device,
    topics: impl Iterator<Item = &'a str>,
) -> StoredRegistration {
    let mut topics: Vec<String> = topics.map(str::to_owned).collect();
    topics.sort_unstable();
    StoredRegistration {
        app: app.to_owned(),
        token: token.to_owned(),
        platform: device.platform,
        environment: device.environment,
        locale: device.locale.clone(),
        receipts: device.receipts,
        // A read shows a subscription for a web registration only.
        subscription: device
            .subscription
            .clone()
            .filter(|_| device.platform == Platform::Web),
        kind: device.kind,
        attributes_type: device.attributes_type.clone(),
        topics,
        created_at: DateTime::<Utc>::default(),
        updated_at: DateTime::<Utc>::default(),
    }
}

fn device_of(write: &RegistrationWrite) -> DeviceKey<'_> {
    (write.app.as_str(), write.token.as_str())
}
