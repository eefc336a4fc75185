-- Why a notification failed (the watchdog's or a dead-lettered report's
-- words), and the token cleanups given up for it.
ALTER TABLE notifications
    ADD COLUMN failure_reason  text,
    ADD COLUMN cleanups_parked integer NOT NULL DEFAULT 0;

-- The watchdog's look-up: notifications still in flight, by last progress.
CREATE INDEX notifications_in_flight_idx ON notifications (updated_at)
    WHERE status IN ('accepted', 'harvesting', 'dispatching');
