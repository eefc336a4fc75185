-- The registration-change notices (V32) said `*` (drop every cached
-- registration) for any statement that touched more than 32 devices. A
-- group commit batch of registration writes (up to 256 rows: about 128
-- devices) is one such statement, so under a steady stream of writes every
-- batch emptied every coordinator's read cache, and the reads fell through
-- to PostgreSQL (issue 36: 392 reads/s instead of 2,000 during a send with
-- the storm).
--
-- Now a statement that touched up to 1,000 rows names its devices in as
-- many notices as their keys need (each under 7,900 bytes, PostgreSQL's
-- limit being 8,000), all delivered at commit; only a larger statement (a
-- bulk load, a hand-written fix) sends `*`.

CREATE OR REPLACE FUNCTION registrations_changed_notice() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keys jsonb[];
    rows_seen bigint;
    chunk text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*), array_agg(DISTINCT jsonb_build_array(app, token)) INTO rows_seen, keys
        FROM (SELECT app, token FROM new_rows LIMIT 1001) AS sample;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT count(*), array_agg(DISTINCT jsonb_build_array(app, token)) INTO rows_seen, keys
        FROM (SELECT app, token FROM old_rows LIMIT 1001) AS sample;
    ELSE
        -- An update's new rows have the old rows' keys or new ones: both.
        SELECT count(*) FILTER (WHERE side = 'old'), array_agg(DISTINCT jsonb_build_array(app, token))
        INTO rows_seen, keys
        FROM (
            (SELECT 'old' AS side, app, token FROM old_rows LIMIT 1001)
            UNION ALL
            (SELECT 'new' AS side, app, token FROM new_rows LIMIT 1001)
        ) AS sample;
    END IF;
    IF rows_seen = 0 THEN
        RETURN NULL;
    END IF;
    IF rows_seen > 1000 THEN
        PERFORM pg_notify('clarion_registrations', '*');
        RETURN NULL;
    END IF;
    -- Cut the keys where their running length crosses a multiple of 3,500
    -- bytes: a chunk holds at most 3,500 bytes plus one key (a token is at
    -- most 4,096 characters), under the limit. A longer one says `*`.
    FOR chunk IN
        SELECT jsonb_agg(key ORDER BY key::text)::text
        FROM (
            SELECT key, sum(length(key::text) + 2) OVER (ORDER BY key::text) AS upto
            FROM unnest(keys) AS key
        ) AS sized
        GROUP BY upto / 3500
    LOOP
        IF length(chunk) > 7900 THEN
            PERFORM pg_notify('clarion_registrations', '*');
        ELSE
            PERFORM pg_notify('clarion_registrations', chunk);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
