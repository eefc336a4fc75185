//! How messages are turned into AMQP bodies and back. One place, so the
//! format (JSON today) can change without touching producers or consumers.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The AMQP `content_type` of every Clarion message body.
pub const CONTENT_TYPE: &str = "application/json";

/// A message body that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("unreadable message body: {0}")]
pub struct DecodeError(#[from] serde_json::Error);

/// A message that could not be written (never expected for Clarion's types).
#[derive(Debug, thiserror::Error)]
#[error("message could not be encoded: {0}")]
pub struct EncodeError(#[from] serde_json::Error);

pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, EncodeError> {
    Ok(serde_json::to_vec(message)?)
}

pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    Ok(serde_json::from_slice(body)?)
}
