//! The registration writes the group commit batches: a device's topic set
//! replaced (`PUT`), one topic followed or dropped, the device forgotten.
//! Each takes its token's lock first; a batch applies them sorted by
//! (app, token), so writes of one token keep their arrival order and
//! concurrent batches lock tokens in one order.

use crate::store::StoreError;
use crate::store::registrations::{self as store, Device, StoredRegistration};
use tokio_postgres::Transaction;

use super::write::{BatchContext, BatchWrite};

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
    /// The registration as stored after the write.
    Stored(StoredRegistration),
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

    async fn apply(&self, tx: &Transaction<'_>, _batch: BatchContext) -> Result<Written, StoreError> {
        let (app, token) = (self.app.as_str(), self.token.as_str());
        Ok(match &self.change {
            Change::Replace { device, topics } => {
                Written::Stored(store::replace(tx, app, token, device, topics).await?)
            }
            Change::AddTopic { topic, max_topics } => {
                Written::Stored(store::add_topic(tx, app, token, topic, *max_topics).await?)
            }
            Change::RemoveTopic { topic } => {
                Written::Removed(u64::from(store::remove_topic(tx, app, token, topic).await?))
            }
            Change::Delete => Written::Removed(store::delete(tx, app, token).await?),
        })
    }
}
