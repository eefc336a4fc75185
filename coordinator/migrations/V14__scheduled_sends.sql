-- Scheduled sends (issue 15): a notification sent with `send_at` is stored
-- `scheduled` and planned only once that time comes ("fired"). Its
-- audience, TTL and timings count from when it fires, so the send time of
-- a notification is coalesce(fired_at, created_at); created_at stays the
-- time it was created (the list is ordered by it).
ALTER TABLE notifications
    -- When the editor wants it sent; NULL for a send-now.
    ADD COLUMN send_at  timestamptz,
    -- When a scheduled notification was planned (fired); NULL for a
    -- send-now (its send time is created_at) and until it fires.
    ADD COLUMN fired_at timestamptz;

ALTER TABLE notifications
    DROP CONSTRAINT notifications_status_check,
    ADD CONSTRAINT notifications_status_check
        CHECK (status IN ('accepted', 'scheduled', 'harvesting', 'dispatching',
                          'complete', 'failed', 'cancelled')),
    ADD CONSTRAINT notifications_scheduled_has_time
        CHECK (status <> 'scheduled' OR send_at IS NOT NULL);

-- The scheduler's look-up, every quarter second on every replica: the
-- scheduled notifications by time. It holds only those waiting to fire.
CREATE INDEX notifications_scheduled_idx ON notifications (send_at) WHERE status = 'scheduled';
