-- Data hygiene: detail rows of finished notifications are removed after a
-- retention period (the summary row stays), stale registrations purged.
--
-- When a notification's detail rows (delivery_batches, notification_accepts,
-- notification_jobs, published_batches, held_tokens, job_outbox) were
-- removed; NULL while they are kept.
ALTER TABLE notifications ADD COLUMN details_removed_at timestamptz;

-- The retention's work list: finished notifications whose details are still
-- there, by last activity. It shrinks as details go. updated_at is already
-- indexed (notifications_in_flight_idx), so progress updates lose no HOT.
--
-- refinery runs every migration inside a transaction, where CREATE INDEX
-- CONCURRENTLY is refused: this plain build blocks writes to notifications
-- (one row per send, far fewer than registrations) while it runs.
CREATE INDEX notifications_details_due_idx ON notifications (updated_at)
    WHERE details_removed_at IS NULL AND status IN ('complete', 'failed', 'cancelled');

-- No index on registrations.updated_at: it would make every re-registration
-- (an UPDATE of updated_at on app launch) a non-HOT update writing all the
-- table's indexes. The stale-registration purge walks the heap instead, a
-- bounded range of pages per statement (a TID range scan).
