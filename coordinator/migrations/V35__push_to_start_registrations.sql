-- Push-to-start registrations (issue 38): a registration says what its
-- token is for. `device` (every existing row) gets alerts; an iOS
-- `push_to_start` token gets only the Live Activity starts of its
-- ActivityKit attributes type (`attributes_type`).
--
-- The harvest key gains `kind` so the alert harvest, which now reads
-- `kind = 'device'` rows only, stays an index-only scan (V5, V16). A start's
-- harvest also filters on `attributes_type`, not in the key: it reads the
-- heap, as a start's audience (push-to-start tokens) is small beside the
-- alerts' and a wider key would cost every alert.
--
-- Online: both columns are catalogue-only changes (a constant default, a
-- nullable column); the checks are NOT VALID (existing rows all hold them:
-- 'device', NULL, and rows written from now on are checked). The new key
-- is the one step that reads the whole table: on a large table build it
-- beforehand, without blocking writes, with
-- deploy/sql/V35_prepare_online.sql; this migration then finds it built
-- (IF NOT EXISTS) and only swaps the primary key.
ALTER TABLE registrations
    ADD COLUMN IF NOT EXISTS kind            text NOT NULL DEFAULT 'device',
    ADD COLUMN IF NOT EXISTS attributes_type text;

ALTER TABLE registrations
    ADD CONSTRAINT registrations_kind_known
        CHECK (kind IN ('device', 'push_to_start')) NOT VALID,
    ADD CONSTRAINT registrations_push_to_start_shape
        CHECK ((kind = 'push_to_start') = (attributes_type IS NOT NULL)
               AND (kind = 'device' OR platform = 'ios')) NOT VALID;

CREATE UNIQUE INDEX IF NOT EXISTS registrations_kind_harvest_key
    ON registrations (app, topic, shard, token) INCLUDE (platform, apns_environment, locale, kind);

ALTER TABLE registrations
    DROP CONSTRAINT registrations_pkey,
    ADD CONSTRAINT registrations_pkey PRIMARY KEY USING INDEX registrations_kind_harvest_key;
