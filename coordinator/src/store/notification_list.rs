//! Listing notifications, newest first, for the console and
//! `GET /api/v1/notifications`: filters on topic, status, creation time and
//! text, and keyset paging on `(created_at, id)` (no offsets: a page costs
//! the same however deep, and sends arriving meanwhile shift nothing).

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;
use uuid::Uuid;

use super::StoreError;
use super::notifications::{COLUMNS, Status, StoredNotification, from_row};

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only notifications sent to this topic (among others).
    pub topic: Option<String>,
    pub status: Option<Status>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before.
    pub until: Option<DateTime<Utc>>,
    /// Words in the title or body (case-insensitive, as typed).
    pub text: Option<String>,
    /// The last item of the previous page.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    pub limit: u32,
}

/// One page of notifications matching `filter`, newest first.
pub async fn list(
    client: &impl GenericClient,
    filter: &ListFilter,
) -> Result<Vec<StoredNotification>, StoreError> {
    let pattern = filter.text.as_deref().map(like_pattern);
    let (after_at, after_id) = filter.after.unzip();
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM notifications
                  WHERE ($1::text IS NULL OR $1 = ANY (topics))
                    AND ($2::text IS NULL OR status = $2)
                    AND ($3::timestamptz IS NULL OR created_at >= $3)
                    AND ($4::timestamptz IS NULL OR created_at < $4)
                    AND ($5::text IS NULL OR payload->>'title' ILIKE $5 OR payload->>'body' ILIKE $5)
                    AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7))
                  ORDER BY created_at DESC, id DESC
                  LIMIT $8"
            ),
            &[
                &filter.topic,
                &filter.status.map(Status::as_str),
                &filter.from,
                &filter.until,
                &pattern,
                &after_at,
                &after_id,
                &i64::from(filter.limit),
            ],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// `text` anywhere, its `%`, `_` and `\\` taken literally.
fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_in_the_text_are_taken_literally() {
        assert_eq!(like_pattern("50% off_now"), "%50\\% off\\_now%");
        assert_eq!(like_pattern("a\\b"), "%a\\\\b%");
    }
}
