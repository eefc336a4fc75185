-- The harvesters' ledger of token batches the broker confirmed, so a shard
-- job redelivered after a crash publishes only the batches the earlier
-- attempt had not: one row per batch, with a hash of its tokens (a batch is
-- skipped only when the re-cut batch is the same one).
CREATE TABLE published_batches (
    notification_id uuid    NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    job_index       integer NOT NULL,
    seq             integer NOT NULL,
    -- xxh3 of the batch's tokens, as a signed 64-bit integer.
    digest          bigint  NOT NULL,
    PRIMARY KEY (notification_id, job_index, seq)
);
