-- The safety valve per segment (platform and APNs environment), for gone
-- tokens as well as invalid ones: a registration is deleted only once its
-- notification is complete and its segment's share of such answers is
-- under the thresholds.
ALTER TABLE delivery_batches ADD COLUMN segment text NOT NULL DEFAULT '';

-- Tokens the providers called gone or invalid, held until the decision.
ALTER TABLE pending_invalid_tokens RENAME TO held_tokens;
ALTER TABLE held_tokens
    ADD COLUMN reason  text NOT NULL DEFAULT 'invalid' CHECK (reason IN ('invalid', 'unregistered')),
    ADD COLUMN segment text NOT NULL DEFAULT '';
-- Coordinators of the previous version still read and write the old name
-- during a rolling upgrade: a simple view is updatable, so their INSERTs
-- and DELETEs keep working. Drop it in a later release.
CREATE VIEW pending_invalid_tokens AS SELECT notification_id, token FROM held_tokens;

-- Segments whose tokens were kept because too many were refused.
ALTER TABLE notifications ADD COLUMN suspect_segments text[] NOT NULL DEFAULT '{}';
