//! Console sessions (`console_sessions`): a signed-in browser's token digest,
//! the digest of the API key it signed in with, its CSRF token and expiry.

use chrono::{DateTime, Utc};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;

use super::StoreError;

/// A live session, as a request presents it.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub key_digest: [u8; 32],
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

/// Stores a new session and sweeps the expired ones.
pub async fn create(
    pool: &PgPool,
    token_digest: &[u8; 32],
    key_digest: &[u8; 32],
    csrf_token: &str,
    expires_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    conn.execute("DELETE FROM console_sessions WHERE expires_at < now()", &[])
        .await?;
    conn.execute(
        "INSERT INTO console_sessions (token_digest, key_digest, csrf_token, expires_at)
         VALUES ($1, $2, $3, $4)",
        &[&&token_digest[..], &&key_digest[..], &csrf_token, &expires_at],
    )
    .await?;
    Ok(())
}

/// The unexpired session whose token has `token_digest`.
pub async fn find(pool: &PgPool, token_digest: &[u8; 32]) -> Result<Option<ConsoleSession>, StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    let row = conn
        .query_opt(
            "SELECT key_digest, csrf_token, expires_at FROM console_sessions
              WHERE token_digest = $1 AND expires_at > now()",
            &[&&token_digest[..]],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let key_digest: Vec<u8> = row.get("key_digest");
    let key_digest = <[u8; 32]>::try_from(key_digest.as_slice())
        .map_err(|_| StoreError::Corrupt("a console session's key digest is not 32 bytes".into()))?;
    Ok(Some(ConsoleSession {
        key_digest,
        csrf_token: row.get("csrf_token"),
        expires_at: row.get("expires_at"),
    }))
}

/// Ends the session whose token has `token_digest` (signing out).
pub async fn delete(pool: &PgPool, token_digest: &[u8; 32]) -> Result<(), StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    conn.execute(
        "DELETE FROM console_sessions WHERE token_digest = $1",
        &[&&token_digest[..]],
    )
    .await?;
    Ok(())
}
