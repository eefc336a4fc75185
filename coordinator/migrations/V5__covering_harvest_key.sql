-- The harvest query reads token, platform and apns_environment for one
-- shard range of one topic. With those two columns INCLUDEd in the primary
-- key it is an index-only scan: the key is read in order and the heap is not
-- touched (pages the visibility map marks all-visible, which autovacuum
-- keeps up). Without them every row was a random heap page visit; measured
-- on 2M rows: 5.0 s -> 0.6 s for the whole audience.
--
-- Building the index locks registrations against writes for its duration
-- (seconds per million rows); run it outside the busiest hour.
CREATE UNIQUE INDEX registrations_harvest_key
    ON registrations (topic, shard, token) INCLUDE (platform, apns_environment);
ALTER TABLE registrations
    DROP CONSTRAINT registrations_pkey,
    ADD CONSTRAINT registrations_pkey PRIMARY KEY USING INDEX registrations_harvest_key;
