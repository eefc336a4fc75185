//! Creating an activity: one transaction stores it, a channel for each
//! APNs environment among its push-to-start tokens (production alone when
//! it has none yet: the activity is still updatable by the phones that
//! start it later from the app), and a `create_channel` command for each,
//! after counting the (app, environment)'s channels under an advisory lock
//! against Apple's limit.

use clarion_proto::Notification;
use clarion_proto::live_activity::{
    ActivityAlert, LiveActivityStart, MAX_CHANNELS_PER_ENVIRONMENT, StoragePolicy,
};
use clarion_proto::payload::MAX_TTL_SECONDS;
use clarion_proto::registration_kind::validate_attributes_type;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{ActivityError, no_nul, unix_now};
use crate::store::StoreError;
use crate::store::audit::{self, Action, Author};
use crate::store::lanes::Lane;
use crate::store::live_activities::{self as store, CREATE_CHANNEL, NewActivity};

/// A channel id as long as Apple's, for checking a start push's size
/// before the channel exists (Apple's are 24 base64 characters; this is
/// more, so a start that fits here fits then).
const PLACEHOLDER_CHANNEL_ID: &str = "dHN0LXVzZS1jaGFubmVsLXBsYWNlaG9sZGVyLWlkLS0=";

/// An activity as accepted: what its start push is built from (stored as
/// `live_activities.request`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Activity {
    pub app: String,
    pub name: String,
    pub attributes_type: String,
    pub attributes: Value,
    pub content_state: Value,
    pub topics: Vec<String>,
    pub storage_policy: StoragePolicy,
    #[serde(default)]
    pub stale_after_seconds: Option<u32>,
    #[serde(default)]
    pub alert: Option<ActivityAlert>,
    pub lane: Lane,
    /// The start push's `timestamp` (Unix seconds), set at the create:
    /// every update's is greater.
    #[serde(default)]
    pub timestamp: i64,
    /// The creating key's fingerprint and name: the start push is sent,
    /// and audited, as theirs.
    pub key_id: String,
    pub key_name: String,
}

impl Activity {
    /// The start push as an ordinary notification (validated as sends
    /// are), carrying `start` once the channels have their ids.
    pub fn start_notification(
        &self,
        start: Option<LiveActivityStart>,
    ) -> Result<Notification, ActivityError> {
        let (title, body) = match &self.alert {
            Some(alert) => (Some(alert.title.clone()), alert.body.clone()),
            None => (None, self.name.clone()),
        };
        let mut notification = Notification::alert(self.topics.clone(), body);
        notification.app = self.app.clone();
        notification.title = title;
        if let Some(stale) = self.stale_after_seconds {
            notification.ttl_seconds = stale;
        }
        notification.live_activity = start;
        notification
            .validated()
            .map_err(|err| ActivityError::Invalid(err.to_string()))
    }

    /// The start push's content, for the channels given.
    pub fn start(
        &self,
        activity_id: Uuid,
        timestamp: i64,
        production_channel: Option<String>,
        sandbox_channel: Option<String>,
    ) -> LiveActivityStart {
        LiveActivityStart {
            activity_id,
            attributes_type: self.attributes_type.clone(),
            attributes: self.attributes.clone(),
            content_state: self.content_state.clone(),
            alert: self.alert.clone(),
            timestamp,
            stale_date: self.stale_after_seconds.map(|secs| timestamp + i64::from(secs)),
            production_channel,
            sandbox_channel,
        }
    }

    /// Every rule a create is held to, each refusal naming its field.
    pub fn validate(&self) -> Result<(), ActivityError> {
        if self.name.trim().is_empty() {
            return Err(ActivityError::Invalid("name must not be empty".into()));
        }
        // The rule push-to-start registrations are held to: only a type
        // they can be registered with can ever match.
        validate_attributes_type(&self.attributes_type)
            .map_err(|err| ActivityError::Invalid(err.to_string()))?;
        no_nul("name", &Value::String(self.name.clone()))?;
        no_nul("attributes", &self.attributes)?;
        no_nul("content_state", &self.content_state)?;
        if self.stale_after_seconds == Some(0) {
            return Err(ActivityError::Invalid(
                "stale_after_seconds must be at least 1".into(),
            ));
        }
        // It is also the start push's TTL, which the providers cap.
        if let Some(stale) = self.stale_after_seconds
            && stale > MAX_TTL_SECONDS
        {
            return Err(ActivityError::Invalid(format!(
                "stale_after_seconds is {stale}; at most {MAX_TTL_SECONDS} (28 days, the start push's TTL)"
            )));
        }
        self.start_notification(None)?;
        let start = self.start(Uuid::nil(), unix_now(), None, None);
        start.body(PLACEHOLDER_CHANNEL_ID).to_json()?;
        Ok(())
    }
}

/// The start push is sent, and audited, as the creating key's.
impl Author for Activity {
    fn key_id(&self) -> &str {
        &self.key_id
    }
    fn key_name(&self) -> &str {
        &self.key_name
    }
}

/// The audit log's target for an activity.
pub fn audit_target(id: Uuid) -> String {
    format!("live-activity/{id}")
}

/// Stores a validated activity, its channels and their create commands;
/// returns the environments it has channels in.
pub async fn create(pool: &PgPool, id: Uuid, activity: &Activity) -> Result<Vec<String>, ActivityError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let mut environments =
        store::starter_environments(&tx, &activity.app, &activity.topics, &activity.attributes_type).await?;
    if environments.is_empty() {
        environments.push("production".to_owned());
    }
    for environment in &environments {
        let live = store::lock_and_count_channels(&tx, &activity.app, environment).await?;
        if live >= i64::from(MAX_CHANNELS_PER_ENVIRONMENT) {
            return Err(ActivityError::Full {
                app: activity.app.clone(),
                environment: environment.clone(),
                limit: MAX_CHANNELS_PER_ENVIRONMENT,
            });
        }
    }
    let timestamp = unix_now();
    let activity = &Activity {
        timestamp,
        ..activity.clone()
    };
    let request = serde_json::to_value(activity).map_err(|err| StoreError::Corrupt(err.to_string()))?;
    let storage_policy = match activity.storage_policy {
        StoragePolicy::None => "none",
        StoragePolicy::MostRecent => "most-recent",
    };
    store::insert_activity(
        &tx,
        &NewActivity {
            id,
            app: &activity.app,
            name: &activity.name,
            attributes_type: &activity.attributes_type,
            request: &request,
            topics: &activity.topics,
            storage_policy,
            timestamp,
        },
    )
    .await?;
    for environment in &environments {
        store::insert_channel(&tx, id, environment, &activity.app).await?;
        store::insert_command(&tx, id, environment, CREATE_CHANNEL, None, None).await?;
    }
    audit::record(&tx, activity, Action::Send, &audit_target(id), "created").await?;
    tx.commit().await?;
    Ok(environments)
}
