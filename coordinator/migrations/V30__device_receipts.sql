-- Device receipts (issue 35): what the phones say they received and opened.
--
-- Registrations may say they report receipts. Adding a column with a
-- constant default changes only the catalogue, whatever the table's size;
-- the harvest key is left alone (the harvest never reads this column).
ALTER TABLE registrations ADD COLUMN IF NOT EXISTS receipts boolean NOT NULL DEFAULT false;

-- The reporting audience of a notification is counted once, after its
-- send, from this partial index alone (index-only scan over the reporting
-- devices of its topics, nothing else). Re-registrations that change only
-- updated_at stay HOT updates: receipts is in no other index.
CREATE INDEX IF NOT EXISTS registrations_reporting_idx
    ON registrations (app, topic, token) WHERE receipts;

-- One row per device and notification: the first `received` and the first
-- `opened` (clamped times). A detail table: removed with the notification's
-- other details by hygiene (CLARION_NOTIFICATION_DETAIL_RETENTION_DAYS).
CREATE TABLE device_receipts (
    notification_id uuid        NOT NULL,
    token           text        NOT NULL,
    received_at     timestamptz NOT NULL,
    opened_at       timestamptz,
    PRIMARY KEY (notification_id, token)
);

-- Per-notification aggregates, kept with the summary row after the details
-- go. Counters are spread over a few slots per notification (a request
-- picks one at random) so concurrent requests for one notification do not
-- all queue on one row lock; readers sum the slots.
CREATE TABLE notification_receipt_counts (
    notification_id uuid     NOT NULL,
    slot            smallint NOT NULL,
    received        bigint   NOT NULL DEFAULT 0,
    opened          bigint   NOT NULL DEFAULT 0,
    -- Receipts of `received` that arrived within two minutes of the send:
    -- what the 90in2 verdict is judged on, so the verdict is the same
    -- whenever it is computed.
    received_in_two bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (notification_id, slot)
);

-- The delay histogram (clamped receipt time less the send time) per event:
-- 100 ms bins under 10 s, 1 s bins under an hour, 1 min bins beyond.
CREATE TABLE notification_receipt_delays (
    notification_id uuid     NOT NULL,
    event           text     NOT NULL CHECK (event IN ('received', 'opened')),
    after_ms        bigint   NOT NULL,
    slot            smallint NOT NULL,
    count           bigint   NOT NULL,
    PRIMARY KEY (notification_id, event, after_ms, slot)
);

-- Counted once per notification after its send: the reporting audience;
-- and the device-side 90in2, stored once two minutes after the send.
CREATE TABLE notification_device_summary (
    notification_id uuid        PRIMARY KEY,
    reporting       bigint      NOT NULL,
    counted_at      timestamptz NOT NULL DEFAULT now(),
    ninety_in_two   boolean
);
