//! A notification as an editor sends it: any JSON body, then the payload
//! rules (topics, text, URLs, TTL, data keys, presentation fields, APNs
//! and FCM size limits).
//! Whatever validation accepts must also satisfy the patterns the OpenAPI
//! description states, or a client following the description would be
//! told "invalid" for a request the service takes.
#![no_main]

use std::sync::LazyLock;

use clarion_fuzz::exercise_notification;
use clarion_proto::Notification;
use clarion_proto::payload::{
    BODY_PATTERN, COLLAPSE_KEY_PATTERN, RESERVED_DATA_KEY_PATTERN, TEXT_PATTERN, URL_PATTERN,
};
use clarion_proto::presentation::NAME_PATTERN;
use clarion_proto::topic::TOPIC_PATTERN;
use libfuzzer_sys::fuzz_target;
use regex::Regex;

struct Patterns {
    topic: Regex,
    text: Regex,
    body: Regex,
    url: Regex,
    collapse_key: Regex,
    reserved: Regex,
    name: Regex,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| Patterns {
    topic: Regex::new(TOPIC_PATTERN).expect("topic pattern"),
    text: Regex::new(TEXT_PATTERN).expect("text pattern"),
    body: Regex::new(BODY_PATTERN).expect("body pattern"),
    url: Regex::new(URL_PATTERN).expect("url pattern"),
    collapse_key: Regex::new(COLLAPSE_KEY_PATTERN).expect("collapse key pattern"),
    reserved: Regex::new(RESERVED_DATA_KEY_PATTERN).expect("reserved key pattern"),
    name: Regex::new(NAME_PATTERN).expect("name pattern"),
});

fuzz_target!(|data: &[u8]| {
    let Ok(notification) = serde_json::from_slice::<Notification>(data) else {
        return;
    };
    exercise_notification(&notification);
    let Ok(valid) = notification.validated() else {
        return;
    };
    let p = &*PATTERNS;
    assert!(valid.topics.iter().all(|t| p.topic.is_match(t)), "{valid:?}");
    if valid.push_type.is_alert() {
        assert!(p.body.is_match(&valid.body), "{valid:?}");
    } else {
        assert!(valid.body.is_empty() && valid.title.is_none(), "{valid:?}");
    }
    let names = [
        valid.sound.clone().flatten(),
        valid.category.clone(),
        valid.android_channel_id.clone(),
    ];
    assert!(names.iter().flatten().all(|n| p.name.is_match(n)), "{valid:?}");
    assert!(valid.title.iter().all(|t| p.text.is_match(t)), "{valid:?}");
    assert!(
        valid
            .link
            .iter()
            .chain(&valid.image_url)
            .all(|u| p.url.is_match(u)),
        "{valid:?}"
    );
    assert!(
        valid.collapse_key.iter().all(|k| p.collapse_key.is_match(k)),
        "{valid:?}"
    );
    for (key, value) in &valid.data {
        assert!(p.text.is_match(key) && !p.reserved.is_match(key), "{key:?}");
        assert!(p.text.is_match(value), "{value:?}");
    }
});
