-- Notifications as sent by an editor, with their live progress.
CREATE TABLE notifications (
    id               uuid        PRIMARY KEY,
    -- The validated clarion_proto::Notification as JSON.
    payload          jsonb       NOT NULL,
    topics           text[]      NOT NULL,
    status           text        NOT NULL DEFAULT 'accepted'
                                 CHECK (status IN ('accepted', 'harvesting', 'dispatching',
                                                   'complete', 'failed', 'cancelled')),
    -- Fingerprint of the API key that sent it (never the key itself).
    api_key_id       text        NOT NULL,
    -- 32 hex characters of the W3C trace id of the send.
    trace_id         text,
    jobs_planned     integer     NOT NULL DEFAULT 0,
    jobs_done        integer     NOT NULL DEFAULT 0,
    jobs_failed      integer     NOT NULL DEFAULT 0,
    audience_ios     bigint      NOT NULL DEFAULT 0,
    audience_android bigint      NOT NULL DEFAULT 0,
    sent_ios         bigint      NOT NULL DEFAULT 0,
    sent_android     bigint      NOT NULL DEFAULT 0,
    failed_ios       bigint      NOT NULL DEFAULT 0,
    failed_android   bigint      NOT NULL DEFAULT 0,
    invalid_ios      bigint      NOT NULL DEFAULT 0,
    invalid_android  bigint      NOT NULL DEFAULT 0,
    expired_ios      bigint      NOT NULL DEFAULT 0,
    expired_android  bigint      NOT NULL DEFAULT 0,
    t50_ms           integer,
    t90_ms           integer,
    t99_ms           integer,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz
);

CREATE INDEX notifications_created_at_idx ON notifications (created_at DESC);

-- Progress counters are updated many times per notification: leave room for
-- HOT updates.
ALTER TABLE notifications SET (fillfactor = 70);
