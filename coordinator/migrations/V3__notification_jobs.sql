-- What each shard job of a notification produced. A job report is counted
-- once: a job redelivered after a harvester crash reports again, and the
-- primary key turns the second report into a no-op.
CREATE TABLE notification_jobs (
    notification_id uuid        NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    job_index       integer     NOT NULL,
    outcome         text        NOT NULL CHECK (outcome IN ('harvested', 'failed')),
    ios             bigint      NOT NULL DEFAULT 0,
    android         bigint      NOT NULL DEFAULT 0,
    batches         integer     NOT NULL DEFAULT 0,
    -- Why a failed job was given up.
    detail          text,
    reported_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (notification_id, job_index)
);

-- Token batches the harvested jobs published: the delivery stage is done
-- with a notification once it has reported that many batches.
ALTER TABLE notifications ADD COLUMN batches_expected bigint NOT NULL DEFAULT 0;
