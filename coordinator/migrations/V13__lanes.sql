-- Lanes and the job relay's scheduling (issue 21).
--
-- A notification's lane says what it may overtake: `urgent` (breaking news)
-- goes before everything, `bulk` (briefings, marketing) yields to
-- everything; `standard` is the default. The relay releases shard jobs by
-- lane, then smallest remaining audience first, and only while the work
-- released but not yet reported stays within a few seconds of delivery.
ALTER TABLE notifications
    ADD COLUMN lane text NOT NULL DEFAULT 'standard'
        CHECK (lane IN ('urgent', 'standard', 'bulk')),
    -- The planner's estimate of the audience (sum of the topic sizes); NULL
    -- when some topic's size was not known. The relay counts a job it
    -- released but whose harvest is not reported yet as this / jobs_planned.
    ADD COLUMN audience_estimate bigint;

