//! The registration writes the group commit batches: a device's topic set
//! replaced (`PUT`), one topic followed or dropped, the device forgotten.
//! A batch applies them sorted by (app, token), in rounds (one write per
//! token each), so writes of one token keep their arrival order and
//! concurrent batches lock tokens in one order; a round is applied
//! set-based, a fixed number of statements for all its writes.

use std::collections::{HashMap, HashSet};

use crate::store::StoreError;
use crate::store::registrations::{self as store, Device, DeviceKey, RowsToStore, StoredRegistration};

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

/// One round (one write per device, sorted by device) in at most eight
/// statements whatever its size: the devices' locks; the devices gaining
/// a topic read (their refusals decided before anything is written); the
/// devices' change notices (the read caches', sent at commit); the
/// devices forgotten; the topics dropped; the topics no longer in a
/// replaced set; the rows inserted or refreshed; the stored devices read
/// back. A statement for a kind of write the round lacks is not sent
/// (a round of `PUT`s: six, with the web subscriptions forgotten).
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
    let mut stored_devices = Vec::new();
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
                stored_devices.push((app, token));
                subscriptions.push(((app, token), device.subscription.as_ref()));
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
                stored_devices.push((app, token));
            }
            Change::RemoveTopic { topic } => dropped.push((app, token, topic.as_str())),
            Change::Delete => forgotten.push((app, token)),
        }
    }
    let (_, _, forgotten, dropped, _, _, _, mut stored) = futures::try_join!(
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
                true => Ok(()),
                false => store::store_rows(tx, &rows).await,
            }
        },
        async {
            match subscriptions.is_empty() {
                true => Ok(()),
                false => store::store_subscriptions(tx, &subscriptions).await,
            }
        },
        async {
            match stored_devices.is_empty() {
                true => Ok(HashMap::new()),
                false => store::read_devices(tx, &stored_devices).await,
            }
        },
    )?;
    writes
        .iter()
        .map(|write| {
            let key = (write.app.clone(), write.token.clone());
            Ok(match &write.change {
                Change::Replace { .. } | Change::AddTopic { .. } => {
                    Written::Stored(Box::new(stored.remove(&key).ok_or(StoreError::UnknownToken)?))
                }
                Change::RemoveTopic { .. } => Written::Removed(u64::from(dropped.contains(&key))),
                Change::Delete => Written::Removed(forgotten.get(&key).copied().unwrap_or(0)),
            })
        })
        .collect()
}

fn device_of(write: &RegistrationWrite) -> DeviceKey<'_> {
    (write.app.as_str(), write.token.as_str())
}
