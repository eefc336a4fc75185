//! What a registered token is for (issue 38): a `device` token gets alerts,
//! an iOS `push_to_start` token only starts Live Activities of one
//! ActivityKit attributes type (`attributes_type`, the Swift type name the
//! app declares). The rules a registration's kind must keep, and the
//! attributes type's pattern for the OpenAPI document.

use serde::{Deserialize, Serialize};

use crate::Platform;

/// Longest `attributes_type`, in bytes.
pub const MAX_ATTRIBUTES_TYPE_BYTES: usize = 128;

/// An `attributes_type` as a regular expression: a Swift type name,
/// possibly qualified (`MatchAttributes`, `Sport.MatchAttributes`).
pub const ATTRIBUTES_TYPE_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$";

/// What a token is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationKind {
    /// An app's device token: alerts and background pushes.
    #[default]
    Device,
    /// An iOS push-to-start token (`Activity<T>.pushToStartToken`): only
    /// Live Activity starts of its attributes type are sent to it.
    PushToStart,
}

impl RegistrationKind {
    pub const ALL: [RegistrationKind; 2] = [RegistrationKind::Device, RegistrationKind::PushToStart];

    pub fn as_str(self) -> &'static str {
        match self {
            RegistrationKind::Device => "device",
            RegistrationKind::PushToStart => "push_to_start",
        }
    }
}

impl std::fmt::Display for RegistrationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RegistrationKind {
    type Err = KindError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        RegistrationKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| KindError::UnknownKind(name.to_owned()))
    }
}

/// Why a registration's kind or attributes type was refused; each message
/// names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("kind {0:?} is not one of \"device\", \"push_to_start\"")]
    UnknownKind(String),
    #[error("kind \"push_to_start\" applies to platform \"ios\" only")]
    PushToStartNotIos,
    #[error("a push_to_start registration needs `attributes_type` (its ActivityAttributes type name)")]
    MissingAttributesType,
    #[error("`attributes_type` applies to kind \"push_to_start\" only")]
    AttributesTypeNotPushToStart,
    #[error("attributes_type {0:?} is not a Swift type name (letters, digits, `_`, `.`-separated)")]
    BadAttributesType(String),
    #[error("attributes_type is {0} bytes; the limit is {MAX_ATTRIBUTES_TYPE_BYTES}")]
    AttributesTypeTooLong(usize),
}

/// Checks an attributes type name.
pub fn validate_attributes_type(name: &str) -> Result<(), KindError> {
    if name.len() > MAX_ATTRIBUTES_TYPE_BYTES {
        return Err(KindError::AttributesTypeTooLong(name.len()));
    }
    let is_identifier = |part: &str| {
        let mut chars = part.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if name.split('.').all(is_identifier) {
        Ok(())
    } else {
        Err(KindError::BadAttributesType(name.to_owned()))
    }
}

/// The kind and attributes type a registration asks for, checked against
/// its platform: `device` (the default) takes no attributes type;
/// `push_to_start` is iOS only and needs one.
pub fn checked_kind(
    platform: Platform,
    kind: Option<&str>,
    attributes_type: Option<String>,
) -> Result<(RegistrationKind, Option<String>), KindError> {
    let kind = kind.map(str::parse).transpose()?.unwrap_or_default();
    match (kind, attributes_type) {
        (RegistrationKind::Device, None) => Ok((kind, None)),
        (RegistrationKind::Device, Some(_)) => Err(KindError::AttributesTypeNotPushToStart),
        (RegistrationKind::PushToStart, _) if platform != Platform::Ios => Err(KindError::PushToStartNotIos),
        (RegistrationKind::PushToStart, None) => Err(KindError::MissingAttributesType),
        (RegistrationKind::PushToStart, Some(name)) => {
            validate_attributes_type(&name)?;
            Ok((kind, Some(name)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_kind_is_device_and_takes_no_attributes_type() {
        assert_eq!(
            checked_kind(Platform::Android, None, None),
            Ok((RegistrationKind::Device, None))
        );
        assert_eq!(
            checked_kind(Platform::Ios, Some("device"), Some("MatchAttributes".into())),
            Err(KindError::AttributesTypeNotPushToStart)
        );
    }

    #[test]
    fn push_to_start_is_ios_only_and_needs_an_attributes_type() {
        assert_eq!(
            checked_kind(
                Platform::Ios,
                Some("push_to_start"),
                Some("Sport.MatchAttributes".into())
            ),
            Ok((
                RegistrationKind::PushToStart,
                Some("Sport.MatchAttributes".into())
            ))
        );
        assert_eq!(
            checked_kind(Platform::Android, Some("push_to_start"), Some("A".into())),
            Err(KindError::PushToStartNotIos)
        );
        assert_eq!(
            checked_kind(Platform::Ios, Some("push_to_start"), None),
            Err(KindError::MissingAttributesType)
        );
        assert!(matches!(
            checked_kind(Platform::Ios, Some("pushtostart"), None),
            Err(KindError::UnknownKind(_))
        ));
    }

    #[test]
    fn the_attributes_type_rule_and_its_pattern_agree() {
        let pattern = regex::Regex::new(ATTRIBUTES_TYPE_PATTERN).unwrap();
        for name in [
            "MatchAttributes",
            "_A",
            "Sport.Match2",
            "a.b.c",
            "",
            "1A",
            "A.",
            ".A",
            "A-B",
            "A..B",
            "é",
        ] {
            assert_eq!(
                validate_attributes_type(name).is_ok(),
                pattern.is_match(name),
                "{name:?}"
            );
        }
        assert!(validate_attributes_type(&"A".repeat(129)).is_err());
    }
}
