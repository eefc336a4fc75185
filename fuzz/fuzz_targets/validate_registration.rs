//! A registration as an app sends it: a platform, a token and topics, each
//! checked as the registrations API does, and the token's shard.
#![no_main]

use arbitrary::Arbitrary;
use clarion_proto::platform::{canonical_token, is_plausible_token, normalize_token, token_prefix};
use clarion_proto::{ApnsEnvironment, Platform, SHARD_SPACE, shard_of, validate_topic};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Registration<'a> {
    platform: &'a str,
    environment: &'a str,
    token: &'a str,
    topics: Vec<&'a str>,
}

fuzz_target!(|registration: Registration| {
    let _ = registration.environment.parse::<ApnsEnvironment>();
    let _ = token_prefix(registration.token);
    if is_plausible_token(registration.token) {
        assert!(shard_of(&canonical_token(registration.token)) < SHARD_SPACE);
    }
    if let Ok(platform) = registration.platform.parse::<Platform>() {
        if let Ok(token) = normalize_token(platform, registration.token) {
            // The canonical form is canonical: normalizing it again keeps it.
            assert_eq!(normalize_token(platform, &token).as_ref(), Ok(&token));
            assert!(is_plausible_token(&token));
        }
    }
    for topic in registration.topics {
        if validate_topic(topic).is_ok() {
            assert!(!topic.is_empty() && !topic.contains("//"));
        }
    }
});
