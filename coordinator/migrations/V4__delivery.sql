-- Delivery progress: what every token batch came to, when pushes were
-- accepted, and the tokens to clean up.

ALTER TABLE notifications
    ADD COLUMN unregistered_ios     bigint      NOT NULL DEFAULT 0,
    ADD COLUMN unregistered_android bigint      NOT NULL DEFAULT 0,
    ADD COLUMN dry_run_ios          bigint      NOT NULL DEFAULT 0,
    ADD COLUMN dry_run_android      bigint      NOT NULL DEFAULT 0,
    ADD COLUMN cancelled_ios        bigint      NOT NULL DEFAULT 0,
    ADD COLUMN cancelled_android    bigint      NOT NULL DEFAULT 0,
    ADD COLUMN batches_reported     bigint      NOT NULL DEFAULT 0,
    -- Registrations deleted because the providers said the token is gone.
    ADD COLUMN registrations_deleted bigint     NOT NULL DEFAULT 0,
    -- What to do with tokens refused as invalid, decided once every batch
    -- is reported: 'delete' while they are a small share of the audience,
    -- 'keep' when so many were refused that Clarion suspects its own
    -- configuration (wrong bundle id, project or APNs environment).
    ADD COLUMN invalid_decision     text        CHECK (invalid_decision IN ('delete', 'keep')),
    ADD COLUMN cancelled_at         timestamptz;

-- One row per reported batch: a batch redelivered after a dispatcher crash
-- reports again, and the primary key makes the second report a no-op.
CREATE TABLE delivery_batches (
    notification_id uuid        NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    job_index       integer     NOT NULL,
    seq             integer     NOT NULL,
    platform        text        NOT NULL CHECK (platform IN ('ios', 'android')),
    sent            integer     NOT NULL,
    failed          integer     NOT NULL,
    invalid         integer     NOT NULL,
    unregistered    integer     NOT NULL,
    expired         integer     NOT NULL,
    dry_run         integer     NOT NULL,
    cancelled       integer     NOT NULL,
    first_accept_at timestamptz,
    last_accept_at  timestamptz,
    reported_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (notification_id, job_index, seq)
);

-- Accepted pushes per 10 ms after the send request: t50 / t90 / t99.
CREATE TABLE notification_accepts (
    notification_id uuid    NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    after_ms        integer NOT NULL,
    accepted        bigint  NOT NULL,
    PRIMARY KEY (notification_id, after_ms)
);

-- Tokens refused as invalid, held until the notification's decision.
CREATE TABLE pending_invalid_tokens (
    notification_id uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    token           text NOT NULL,
    PRIMARY KEY (notification_id, token)
);
