//! Cutting a stream of (token, platform, environment, locale) into token
//! batches.
//!
//! One open batch per delivery target (a platform and APNs environment:
//! a segment of the safety valve) and text (the default, or one of the notification's
//! `localizations`, the device's best match): every batch gets one payload.
//! A batch leaves as soon as it is full, the rest when the stream ends.
//! Sequence numbers follow the order batches leave, so the same stream cut
//! with the same size always yields the same batch ids.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use clarion_proto::{
    ApnsEnvironment, BatchId, Notification, PerPlatform, Platform, TokenBatch, WebSubscription, WireVersion,
};
use uuid::Uuid;

/// Where a batch goes: a platform and one of its APNs environments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    platform: Platform,
    environment: ApnsEnvironment,
}

impl Target {
    /// Every target, in [`Platform::ALL`] then environment order: the order
    /// [`BatchCutter::finish`] seals in (batch ids depend on it).
    fn all() -> Vec<Target> {
        Platform::ALL
            .into_iter()
            .flat_map(|platform| {
                platform.environments().iter().map(move |&environment| Target {
                    platform,
                    environment,
                })
            })
            .collect()
    }

    /// Where a device of `platform` in `environment` goes: a platform that
    /// keeps no environments apart has one target.
    fn of(platform: Platform, environment: ApnsEnvironment) -> Self {
        let environments = platform.environments();
        let environment = if environments.contains(&environment) {
            environment
        } else {
            environments.first().copied().unwrap_or_default()
        };
        Target {
            platform,
            environment,
        }
    }
}

/// What a job's batches held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchTotals {
    /// Devices of each platform.
    pub devices: PerPlatform<u64>,
    pub batches: u32,
}

impl BatchTotals {
    /// Counts one more batch.
    pub fn add(&mut self, batch: &TokenBatch) {
        self.devices[batch.platform] += batch.tokens.len() as u64;
        self.batches += 1;
    }
}

pub struct BatchCutter {
    notification_id: Uuid,
    job_index: u32,
    sent_at: DateTime<Utc>,
    notification: Notification,
    batch_size: usize,
    /// The texts: `None` (the default) then each key of `localizations`.
    texts: Vec<Option<String>>,
    /// A device locale → index in `texts`, as resolved so far.
    resolved: HashMap<String, usize>,
    /// Every target, in sealing order.
    targets: Vec<Target>,
    /// Open batches, indexed by target × text.
    open: Vec<Vec<String>>,
    /// The web subscriptions of the open batches' tokens, in their order
    /// (empty for the other platforms).
    subscriptions: Vec<Vec<WebSubscription>>,
    /// Batches sealed so far: the next batch's `seq`.
    sealed: u32,
}

impl BatchCutter {
    pub fn new(
        notification_id: Uuid,
        job_index: u32,
        sent_at: DateTime<Utc>,
        notification: Notification,
        batch_size: usize,
    ) -> Self {
        let batch_size = batch_size.max(1);
        let targets = Target::all();
        let texts: Vec<Option<String>> = std::iter::once(None)
            .chain(notification.localizations.keys().cloned().map(Some))
            .collect();
        Self {
            notification_id,
            job_index,
            sent_at,
            notification,
            batch_size,
            open: vec![Vec::new(); targets.len() * texts.len()],
            subscriptions: vec![Vec::new(); targets.len() * texts.len()],
            targets,
            texts,
            resolved: HashMap::new(),
            sealed: 0,
        }
    }

    /// The index in `texts` of what a device with `locale` gets.
    fn text_of(&mut self, locale: Option<&str>) -> usize {
        let Some(locale) = locale.filter(|_| self.texts.len() > 1) else {
            return 0;
        };
        if let Some(index) = self.resolved.get(locale) {
            return *index;
        }
        let best = clarion_proto::best_match(&self.notification.localizations, Some(locale));
        let index = best
            .and_then(|key| self.texts.iter().position(|text| text.as_deref() == Some(key)))
            .unwrap_or(0);
        self.resolved.insert(locale.to_owned(), index);
        index
    }

    /// Adds one token of a device with `locale` (lower case); returns a
    /// batch when this token filled one.
    pub fn push(
        &mut self,
        token: &str,
        platform: Platform,
        environment: ApnsEnvironment,
        locale: Option<&str>,
    ) -> Option<TokenBatch> {
        self.push_subscribed(token, platform, environment, locale, None)
    }

    /// [`BatchCutter::push`] with the device's web push subscription (web
    /// devices only), which its batch carries beside the token.
    pub fn push_subscribed(
        &mut self,
        token: &str,
        platform: Platform,
        environment: ApnsEnvironment,
        locale: Option<&str>,
        subscription: Option<WebSubscription>,
    ) -> Option<TokenBatch> {
        let target = Target::of(platform, environment);
        let text = self.text_of(locale);
        let target_index = self.target_index(target);
        let slot = target_index * self.texts.len() + text;
        let open = &mut self.open[slot];
        if open.capacity() == 0 {
            open.reserve_exact(self.batch_size);
        }
        open.push(token.to_owned());
        if let Some(subscription) = subscription {
            self.subscriptions[slot].push(subscription);
        }
        (open.len() >= self.batch_size).then(|| self.seal(target_index, text))
    }

    /// The position of `target` in `targets` (a handful: a scan is cheap).
    fn target_index(&self, target: Target) -> usize {
        self.targets.iter().position(|t| *t == target).unwrap_or_default()
    }

    /// The partly filled batches, in target then text order.
    pub fn finish(mut self) -> Vec<TokenBatch> {
        let mut batches = Vec::new();
        for target in 0..self.targets.len() {
            for text in 0..self.texts.len() {
                if !self.open[target * self.texts.len() + text].is_empty() {
                    batches.push(self.seal(target, text));
                }
            }
        }
        batches
    }

    fn seal(&mut self, target_index: usize, text: usize) -> TokenBatch {
        let target = self.targets[target_index];
        let slot = target_index * self.texts.len() + text;
        let tokens = std::mem::take(&mut self.open[slot]);
        let subscriptions = std::mem::take(&mut self.subscriptions[slot]);
        let batch = TokenBatch {
            v: WireVersion::CURRENT,
            batch_id: BatchId {
                notification_id: self.notification_id,
                job_index: self.job_index,
                seq: self.sealed,
            },
            platform: target.platform,
            environment: target.environment,
            sent_at: self.sent_at,
            notification: self.notification.clone(),
            locale: self.texts[text].clone(),
            tokens,
            subscriptions,
        };
        self.sealed += 1;
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn notification() -> Notification {
        serde_json::from_str(r#"{"topics":["t"],"body":"b"}"#).unwrap()
    }

    fn cut(rows: &[(String, Platform, ApnsEnvironment)], size: usize) -> (Vec<TokenBatch>, BatchTotals) {
        let mut cutter = BatchCutter::new(Uuid::nil(), 4, DateTime::UNIX_EPOCH, notification(), size);
        let mut batches: Vec<TokenBatch> = rows
            .iter()
            .filter_map(|(token, platform, env)| cutter.push(token, *platform, *env, None))
            .collect();
        batches.extend(cutter.finish());
        let mut totals = BatchTotals::default();
        batches.iter().for_each(|batch| totals.add(batch));
        (batches, totals)
    }

    fn row_strategy() -> impl Strategy<Value = (String, Platform, ApnsEnvironment)> {
        ("[0-9a-f]{8}", 0u8..3).prop_map(|(token, kind)| match kind {
            0 => (token, Platform::Ios, ApnsEnvironment::Production),
            1 => (token, Platform::Ios, ApnsEnvironment::Sandbox),
            _ => (token, Platform::Android, ApnsEnvironment::Production),
        })
    }

    #[test]
    fn batches_leave_when_full_and_the_rest_at_the_end() {
        let rows: Vec<_> = (0..5)
            .map(|i| (format!("a{i}"), Platform::Android, ApnsEnvironment::Production))
            .collect();
        let (batches, totals) = cut(&rows, 2);
        let sizes: Vec<usize> = batches.iter().map(|b| b.tokens.len()).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert_eq!(
            totals,
            BatchTotals {
                devices: PerPlatform::from_fn(|p| if p == Platform::Android { 5 } else { 0 }),
                batches: 3
            }
        );
        assert_eq!(batches[2].batch_id.seq, 2);
        assert_eq!(batches[0].batch_id.job_index, 4);
    }

    #[test]
    fn each_batch_holds_devices_of_one_text() {
        let mut notification = notification();
        for tag in ["fr", "fr-ca"] {
            let text = clarion_proto::LocalizedText {
                title: None,
                body: tag.into(),
            };
            notification.localizations.insert(tag.into(), text);
        }
        let mut cutter = BatchCutter::new(Uuid::nil(), 0, DateTime::UNIX_EPOCH, notification, 10);
        let android = (Platform::Android, ApnsEnvironment::Production);
        for (token, locale) in [
            ("a", Some("fr-ca")),
            ("b", Some("fr-be")),
            ("c", Some("de")),
            ("d", None),
            ("e", Some("fr")),
            ("f", Some("fr-ca")),
        ] {
            assert!(cutter.push(token, android.0, android.1, locale).is_none());
        }
        let batches: Vec<(Option<String>, Vec<String>)> = cutter
            .finish()
            .into_iter()
            .map(|b| (b.locale, b.tokens))
            .collect();
        let owned = |tokens: &[&str]| tokens.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            batches,
            vec![
                (None, owned(&["c", "d"])),
                (Some("fr".into()), owned(&["b", "e"])),
                (Some("fr-ca".into()), owned(&["a", "f"])),
            ]
        );
    }

    proptest! {
        #[test]
        fn every_token_lands_once_in_a_batch_of_its_target(rows in proptest::collection::vec(row_strategy(), 0..300), size in 1usize..50) {
            let (batches, totals) = cut(&rows, size);
            // Each token once, in a batch of its own platform and environment.
            let mut seen: Vec<(String, Platform, ApnsEnvironment)> = batches
                .iter()
                .flat_map(|b| b.tokens.iter().map(move |t| (t.clone(), b.platform, b.environment)))
                .collect();
            let mut expected = rows.clone();
            seen.sort();
            expected.sort();
            prop_assert_eq!(seen, expected);
            // Sizes bounded, ids unique and numbered in order.
            for (seq, batch) in batches.iter().enumerate() {
                prop_assert!(!batch.tokens.is_empty() && batch.tokens.len() <= size);
                prop_assert_eq!(batch.batch_id.seq as usize, seq);
            }
            prop_assert_eq!(totals.batches as usize, batches.len());
            prop_assert_eq!(totals.devices.total(), rows.len() as u64);
            // The same stream cut again gives the same batches.
            prop_assert_eq!(cut(&rows, size).0, batches);
        }
    }
}
