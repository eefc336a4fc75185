//! The registration-change notices on `clarion_registrations`: a JSON
//! array of `[app, token]` pairs under PostgreSQL's 8,000-byte payload
//! limit, or `*` (drop everything). The trigger on `registrations` sends
//! them for any writer (migrations V32, V38); the group commit's writes
//! send their own (migration V39) and the trigger stays quiet for them.

/// The channel the notices go to.
pub const CHANNEL: &str = "clarion_registrations";

/// What a notice says when its devices are not named.
pub const EVERYTHING: &str = "*";

/// Longest payload sent (PostgreSQL refuses 8,000 bytes and more).
const PAYLOAD_LIMIT: usize = 7_900;

/// The notices that name `devices`: as few JSON arrays as fit the limit,
/// in the order given; `*` alone when one key is too long to name.
pub fn payloads<'a>(devices: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut chunk = String::from("[");
    for (app, token) in devices {
        // A pair of strings serialises as the array `[app, token]`; it
        // cannot fail, but a key that could not be written says everything.
        let Ok(key) = serde_json::to_string(&(app, token)) else {
            return vec![EVERYTHING.to_owned()];
        };
        if key.len() + 2 > PAYLOAD_LIMIT {
            return vec![EVERYTHING.to_owned()];
        }
        if chunk.len() + key.len() + 2 > PAYLOAD_LIMIT {
            chunk.push(']');
            payloads.push(std::mem::replace(&mut chunk, String::from("[")));
        }
        if chunk.len() > 1 {
            chunk.push(',');
        }
        chunk.push_str(&key);
    }
    if chunk.len() > 1 {
        chunk.push(']');
        payloads.push(chunk);
    }
    payloads
}

/// The devices a notice names; `None` for `*` (or a notice this build
/// cannot read: everything goes, to be safe).
pub fn devices_of(payload: &str) -> Option<Vec<(String, String)>> {
    serde_json::from_str(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_round_trip_in_chunks_under_the_limit() {
        let tokens: Vec<String> = (0..300).map(|n| format!("{n:064x}")).collect();
        let devices: Vec<(&str, &str)> = tokens.iter().map(|t| ("news", t.as_str())).collect();
        let payloads = payloads(devices.iter().copied());
        assert!(payloads.len() > 1, "300 keys of 75 bytes need several notices");
        let mut named = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= PAYLOAD_LIMIT, "{} bytes", payload.len());
            named.extend(devices_of(payload).expect("a notice names its devices"));
        }
        let expected: Vec<(String, String)> = devices
            .iter()
            .map(|(app, token)| (app.to_string(), token.to_string()))
            .collect();
        assert_eq!(named, expected);
    }

    #[test]
    fn a_key_too_long_to_name_says_everything() {
        let long = "x".repeat(PAYLOAD_LIMIT);
        assert_eq!(payloads([("news", "a"), ("news", long.as_str())]), vec!["*"]);
        assert_eq!(devices_of("*"), None);
    }

    #[test]
    fn no_devices_no_notice() {
        assert!(payloads([]).is_empty());
    }

    #[test]
    fn quotes_and_backslashes_in_keys_are_escaped() {
        let payloads = payloads([("a\"pp", "to\\ken")]);
        assert_eq!(
            devices_of(&payloads[0]),
            Some(vec![("a\"pp".to_owned(), "to\\ken".to_owned())])
        );
    }
}
