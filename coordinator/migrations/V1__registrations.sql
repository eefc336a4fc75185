-- Device registrations: one row per (token, topic).
--
-- The primary key serves the harvest query, which reads one contiguous shard
-- range of one topic at a time:
--   WHERE topic = $1 AND shard >= $2 AND shard < $3
-- `shard` is clarion_proto::shard_of(token), a stable hash into 0..1024.
CREATE TABLE registrations (
    topic            text        NOT NULL,
    shard            smallint    NOT NULL CHECK (shard >= 0 AND shard < 1024),
    token            text        NOT NULL,
    platform         text        NOT NULL CHECK (platform IN ('ios', 'android')),
    -- Sandbox (development build) tokens are kept apart so they are never
    -- sent to, and rejected by, APNs production.
    apns_environment text        NOT NULL DEFAULT 'production'
                                 CHECK (apns_environment IN ('production', 'sandbox')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Refreshed on every re-registration: stale-token purges key on it.
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, shard, token)
);

-- "Which topics does this token follow?" (read, replace and delete by token).
CREATE INDEX registrations_token_topic_idx ON registrations (token, topic);

-- The table churns: token cleanup deletes rows after every large send and
-- apps re-register on launch (an UPDATE of updated_at). With the default
-- autovacuum scale factor (20%) a 10M-row table waits for 2M dead rows before
-- vacuuming and bloats; vacuum after 1% instead, and work faster when it does.
-- fillfactor leaves room on each page so updated_at refreshes stay HOT
-- updates (no index writes).
ALTER TABLE registrations SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
