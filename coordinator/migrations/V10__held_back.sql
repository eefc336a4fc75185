-- Pushes a dispatcher's breaker held back (not sent) because the first
-- pushes of their segment were all answered gone, invalid or in a way that
-- points at the configuration.
ALTER TABLE delivery_batches ADD COLUMN held_back integer NOT NULL DEFAULT 0;
ALTER TABLE notifications
    ADD COLUMN held_back_ios     bigint NOT NULL DEFAULT 0,
    ADD COLUMN held_back_android bigint NOT NULL DEFAULT 0;
