-- Live Activities (issue 38): activities, their APNs broadcast channels,
-- their updates, and the outbox of commands the iOS dispatcher carries out
-- against Apple (create a channel, broadcast, delete a channel).
--
-- The coordinator never calls Apple: every request is committed here before
-- the API answers 201/202, and a relay publishes committed, unpublished
-- commands with publisher confirms (as job_outbox does for shard jobs). The
-- dispatcher's outcome comes back as a report and is recorded once per
-- command (outcome_at). See docs/src/api/live-activities.md#how-it-flows.
CREATE TABLE live_activities (
    id                  uuid        PRIMARY KEY,
    app                 text        NOT NULL DEFAULT 'default',
    name                text        NOT NULL,
    attributes_type     text        NOT NULL,
    -- The request as accepted (attributes, content_state, topics, alert,
    -- storage_policy, stale_after_seconds, lane): the start push is built
    -- from it once every channel has its id.
    request             jsonb       NOT NULL,
    topics              text[]      NOT NULL,
    storage_policy      text        NOT NULL DEFAULT 'none'
                                    CHECK (storage_policy IN ('none', 'most-recent')),
    -- The start push, an ordinary notification, once accepted.
    start_notification  uuid        REFERENCES notifications (id) ON DELETE SET NULL,
    -- The last `timestamp` given to this activity's pushes (Unix seconds):
    -- each update gets greatest(now, last + 1), so they only increase.
    last_timestamp      bigint      NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    ended_at            timestamptz,
    deleted_at          timestamptz
);

-- One broadcast channel per activity and APNs environment.
CREATE TABLE live_activity_channels (
    activity_id  uuid        NOT NULL REFERENCES live_activities (id) ON DELETE CASCADE,
    environment  text        NOT NULL CHECK (environment IN ('production', 'sandbox')),
    app          text        NOT NULL,
    -- Apple's `apns-channel-id`, once the create was answered.
    channel_id   text,
    state        text        NOT NULL DEFAULT 'creating'
                             CHECK (state IN ('creating', 'open', 'failed', 'deleting', 'deleted')),
    reason       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    deleted_at   timestamptz,
    PRIMARY KEY (activity_id, environment)
);

-- Apple allows 10,000 channels per app and environment: the create counts
-- the ones not deleted (under an advisory lock per app and environment).
CREATE INDEX live_activity_channels_live_idx ON live_activity_channels (app, environment)
    WHERE state <> 'deleted';

-- An update as accepted, idempotent by (activity, id): a replay answers the
-- stored row.
CREATE TABLE live_activity_updates (
    activity_id  uuid        NOT NULL REFERENCES live_activities (id) ON DELETE CASCADE,
    id           uuid        NOT NULL,
    event        text        NOT NULL CHECK (event IN ('update', 'end')),
    "timestamp"  bigint      NOT NULL,
    -- The APNs payload as sent to every channel (at most 4096 bytes).
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL DEFAULT 10 CHECK (priority IN (5, 10)),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (activity_id, id)
);

-- What the dispatcher is asked to do at Apple, and what Apple answered.
CREATE TABLE live_activity_commands (
    id            uuid        PRIMARY KEY,
    activity_id   uuid        NOT NULL REFERENCES live_activities (id) ON DELETE CASCADE,
    environment   text        NOT NULL CHECK (environment IN ('production', 'sandbox')),
    kind          text        NOT NULL CHECK (kind IN ('create_channel', 'broadcast', 'delete_channel')),
    -- The update a broadcast carries; NULL for channel management.
    update_id     uuid,
    -- The channel a delete names (a broadcast reads its channel's id at release).
    channel_id    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Set once the broker confirmed the command; NULL while it waits.
    published_at  timestamptz,
    -- Apple's answer as the dispatcher reported it, recorded once.
    outcome       text        CHECK (outcome IN ('created', 'sent', 'deleted', 'refused', 'failed')),
    status        smallint,
    reason        text,
    outcome_at    timestamptz,
    FOREIGN KEY (activity_id, update_id) REFERENCES live_activity_updates (activity_id, id),
    CHECK ((kind = 'broadcast') = (update_id IS NOT NULL))
);

-- The relay's work list: only commands still waiting, oldest first.
CREATE INDEX live_activity_commands_waiting_idx ON live_activity_commands (created_at, id)
    WHERE published_at IS NULL;
CREATE INDEX live_activity_commands_activity_idx ON live_activity_commands (activity_id, created_at);
