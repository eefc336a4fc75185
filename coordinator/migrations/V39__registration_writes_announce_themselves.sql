-- The group commit's registration writes name their devices themselves:
-- each round sends one `clarion_registrations` notice per chunk of its
-- devices' keys (coordinator/src/store/registrations.rs, `announce`) and
-- sets `clarion.registration_notices` to `sent` for its transaction, in the
-- same statement. The trigger (V32, V38) then has nothing to add and
-- returns at once: its aggregation over the transition tables was about
-- 12% of PostgreSQL's time per registration write (issue 36), twice per
-- round (an upsert fires the INSERT and the UPDATE statement triggers).
--
-- Every other writer (token cleanup, hygiene, held tokens, a bulk load, a
-- hand-written fix) leaves the setting unset and is announced by the
-- trigger, as before. The setting is local to the transaction (and undone
-- with a rolled-back savepoint, as the notices it went with are).

CREATE OR REPLACE FUNCTION registrations_changed_notice() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keys jsonb[];
    rows_seen bigint;
    chunk text;
BEGIN
    IF current_setting('clarion.registration_notices', true) = 'sent' THEN
        RETURN NULL;
    END IF;
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
