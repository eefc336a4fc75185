-- The transactional outbox of shard jobs.
--
-- A notification and its shard jobs are committed in one transaction before
-- anything is published; the coordinator's job relay then publishes
-- committed, unpublished jobs with publisher confirms and marks them
-- published. A crash between the confirm and the mark re-publishes the job
-- (at-least-once: its report is counted once); a crash before the commit
-- publishes nothing. So no job reaches RabbitMQ whose notification is not
-- committed, and re-sending an id never publishes its jobs again.
CREATE TABLE job_outbox (
    notification_id uuid        NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    job_index       integer     NOT NULL,
    -- The job's shard range, start..end (clarion_proto::ShardRange).
    shard_start     smallint    NOT NULL,
    shard_end       smallint    NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Set once the broker confirmed the job; NULL while it waits.
    published_at    timestamptz,
    PRIMARY KEY (notification_id, job_index),
    CHECK (0 <= shard_start AND shard_start < shard_end AND shard_end <= 1024)
);

-- The relay's work list: only jobs still waiting, oldest first.
CREATE INDEX job_outbox_waiting_idx ON job_outbox (created_at, notification_id, job_index)
    WHERE published_at IS NULL;

-- The W3C trace headers of the notification's planning span, so the jobs the
-- relay publishes later still join the notification's trace.
ALTER TABLE notifications ADD COLUMN trace_context jsonb;
