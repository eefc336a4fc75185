//! The web push payload of a notification (what the browser's service
//! worker reads, or the Declarative Web Push form Safari shows by itself)
//! and its size once encrypted: RFC 8291's single aes128gcm record must fit
//! the 4,096 bytes push services accept.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{Notification, PayloadError};

/// Largest encrypted web push message push services must accept (RFC 8030
/// §7.2), in bytes.
pub const WEB_MAX_PAYLOAD_BYTES: usize = 4096;
/// What aes128gcm (RFC 8188 / 8291) adds to the plaintext of a single
/// record: the header (16-byte salt, 4-byte record size, 1-byte key-id
/// length, 65-byte sender key), the padding delimiter and the 16-byte tag.
pub const WEB_ENCRYPTION_OVERHEAD: usize = 16 + 4 + 1 + 65 + 1 + 16;
/// The Declarative Web Push form's magic number.
pub const DECLARATIVE_WEB_PUSH: u16 = 8030;

/// How a notification is shaped for browsers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebOptions {
    /// The Declarative Web Push form (`{"web_push": 8030, "notification":
    /// …}`), shown by Safari without a service worker; it needs a `link`.
    #[serde(default)]
    pub declarative: bool,
}

impl Notification {
    /// The JSON a browser gets for this notification, before encryption:
    /// by default `{title, body, link, image, data, notification_id}` for
    /// the site's service worker; with `web.declarative`, the Declarative
    /// Web Push form (its `navigate` is the link; `data` carries the
    /// notification's data and id).
    pub fn web_payload(&self, notification_id: Uuid) -> Vec<u8> {
        let id = notification_id.hyphenated().to_string();
        let declarative = self.web.is_some_and(|web| web.declarative);
        let value = if declarative {
            let mut data: Map<String, Value> = self.data.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            data.insert(super::NOTIFICATION_ID_KEY.into(), json!(id));
            let mut notification = Map::new();
            // The form requires a title: the body stands in when none is given.
            notification.insert("title".into(), json!(self.title.as_deref().unwrap_or(&self.body)));
            if self.title.is_some() {
                notification.insert("body".into(), json!(self.body));
            }
            notification.insert("navigate".into(), json!(self.link));
            if let Some(image) = &self.image_url {
                notification.insert("image".into(), json!(image));
            }
            if let Some(tag) = &self.collapse_key {
                notification.insert("tag".into(), json!(tag));
            }
            notification.insert("data".into(), Value::Object(data));
            json!({"web_push": DECLARATIVE_WEB_PUSH, "notification": notification})
        } else {
            let mut body = Map::new();
            if let Some(title) = &self.title {
                body.insert("title".into(), json!(title));
            }
            body.insert("body".into(), json!(self.body));
            if let Some(link) = &self.link {
                body.insert("link".into(), json!(link));
            }
            if let Some(image) = &self.image_url {
                body.insert("image".into(), json!(image));
            }
            if !self.data.is_empty() {
                body.insert("data".into(), json!(self.data));
            }
            body.insert(super::NOTIFICATION_ID_KEY.into(), json!(id));
            Value::Object(body)
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// Size of the encrypted web push message for this notification.
    pub fn web_message_bytes(&self) -> usize {
        self.web_payload(Uuid::nil()).len() + WEB_ENCRYPTION_OVERHEAD
    }

    /// The web rules: a declarative push needs a link, and the encrypted
    /// message fits [`WEB_MAX_PAYLOAD_BYTES`].
    pub(super) fn check_web(&self) -> Result<(), PayloadError> {
        if self.web.is_some_and(|web| web.declarative) && self.link.is_none() {
            return Err(PayloadError::DeclarativeNeedsLink);
        }
        let bytes = self.web_message_bytes();
        if bytes > WEB_MAX_PAYLOAD_BYTES {
            return Err(PayloadError::WebTooLarge(bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(json: &str) -> Notification {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_default_form_is_what_a_service_worker_reads() {
        let n = notification(
            r#"{"topics":["t"],"title":"T","body":"B","link":"https://x/a","image_url":"https://x/i.png","data":{"k":"v"}}"#,
        );
        let payload: Value = serde_json::from_slice(&n.web_payload(Uuid::nil())).unwrap();
        assert_eq!(
            payload,
            json!({"title":"T","body":"B","link":"https://x/a","image":"https://x/i.png","data":{"k":"v"},
                   "notification_id":"00000000-0000-0000-0000-000000000000"})
        );
    }

    /// A fixture of `examples/web/fixtures/`, whose service worker
    /// (`examples/web/alert.js`) `examples/web/check.mjs` checks against
    /// the same files.
    fn example_fixture(name: &str) -> String {
        let path = format!("{}/../examples/web/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
    }

    #[test]
    fn the_web_example_reads_exactly_what_the_dispatcher_sends() {
        let n = notification(&example_fixture("notification.json"));
        let expected: Value = serde_json::from_str(&example_fixture("payload.json")).unwrap();
        let payload: Value = serde_json::from_slice(&n.web_payload(Uuid::nil())).unwrap();
        assert_eq!(payload, expected, "examples/web/fixtures/payload.json is stale");

        let declarative = Notification {
            web: Some(WebOptions { declarative: true }),
            ..n
        };
        let expected: Value = serde_json::from_str(&example_fixture("declarative.json")).unwrap();
        let payload: Value = serde_json::from_slice(&declarative.web_payload(Uuid::nil())).unwrap();
        assert_eq!(
            payload, expected,
            "examples/web/fixtures/declarative.json is stale"
        );
    }

    #[test]
    fn the_declarative_form_navigates_to_the_link() {
        let n = notification(
            r#"{"topics":["t"],"title":"T","body":"B","link":"https://x/a","web":{"declarative":true}}"#,
        );
        let payload: Value = serde_json::from_slice(&n.web_payload(Uuid::nil())).unwrap();
        assert_eq!(payload["web_push"], 8030);
        assert_eq!(payload["notification"]["navigate"], "https://x/a");
        assert_eq!(payload["notification"]["title"], "T");
        assert_eq!(
            payload["notification"]["data"]["notification_id"],
            "00000000-0000-0000-0000-000000000000"
        );
        let no_link = notification(r#"{"topics":["t"],"body":"B","web":{"declarative":true}}"#);
        let err = no_link.validated().unwrap_err();
        assert_eq!(err, PayloadError::DeclarativeNeedsLink);
        assert!(err.to_string().starts_with("link"), "{err}");
    }

    #[test]
    fn an_encrypted_message_over_4096_bytes_is_refused() {
        let fits = notification(r#"{"topics":["t"],"body":"x"}"#);
        assert!(fits.web_message_bytes() < WEB_MAX_PAYLOAD_BYTES);
        let mut big = fits.clone();
        big.data.insert("big".into(), "x".repeat(3_000));
        big.body = "y".repeat(1_000);
        assert!(matches!(
            big.validated(),
            Err(PayloadError::WebTooLarge(_))
                | Err(PayloadError::ApnsTooLarge(_))
                | Err(PayloadError::FcmTooLarge(_))
        ));
        let mut web_only_too_big = fits;
        web_only_too_big.data.insert("big".into(), "x".repeat(20));
        let over = WEB_MAX_PAYLOAD_BYTES + 1 - web_only_too_big.web_message_bytes();
        web_only_too_big.body.push_str(&"z".repeat(over));
        assert_eq!(web_only_too_big.web_message_bytes(), WEB_MAX_PAYLOAD_BYTES + 1);
        assert_eq!(
            web_only_too_big.check_web(),
            Err(PayloadError::WebTooLarge(WEB_MAX_PAYLOAD_BYTES + 1))
        );
    }
}
