-- Coordinators keep the registrations the API reads in memory
-- (coordinator/src/read_cache/registrations.rs) and drop an entry when it
-- changes: every statement that inserts, updates or deletes registrations
-- sends one notice on channel `clarion_registrations`, delivered to every
-- listening coordinator when (and only if) its transaction commits. A
-- trigger rather than the writers themselves, so no writer (API, token
-- cleanup, hygiene, held tokens, a bulk load, a hand-written fix) can be
-- forgotten. The payload is a JSON array of [app, token] pairs; a statement
-- that touched more than 32 devices (or whose list would not fit a notice's
-- 8000 bytes) sends `*`: drop everything.

CREATE FUNCTION registrations_changed_notice() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keys jsonb;
    changed bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*), jsonb_agg(key) INTO changed, keys FROM (
            SELECT DISTINCT jsonb_build_array(app, token) AS key
            FROM (SELECT app, token FROM new_rows LIMIT 1000) AS sample
        ) AS distinct_keys;
        IF (SELECT count(*) FROM (SELECT 1 FROM new_rows LIMIT 1001) AS rows) > 1000 THEN
            changed := 1001;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT count(*), jsonb_agg(key) INTO changed, keys FROM (
            SELECT DISTINCT jsonb_build_array(app, token) AS key
            FROM (SELECT app, token FROM old_rows LIMIT 1000) AS sample
        ) AS distinct_keys;
        IF (SELECT count(*) FROM (SELECT 1 FROM old_rows LIMIT 1001) AS rows) > 1000 THEN
            changed := 1001;
        END IF;
    ELSE
        SELECT count(*), jsonb_agg(key) INTO changed, keys FROM (
            SELECT DISTINCT jsonb_build_array(app, token) AS key
            FROM (
                (SELECT app, token FROM old_rows LIMIT 1000)
                UNION ALL
                (SELECT app, token FROM new_rows LIMIT 1000)
            ) AS sample
        ) AS distinct_keys;
        IF (SELECT count(*) FROM (SELECT 1 FROM old_rows LIMIT 1001) AS rows) > 1000 THEN
            changed := 1001;
        END IF;
    END IF;
    IF changed = 0 THEN
        RETURN NULL;
    END IF;
    IF changed > 32 OR length(keys::text) > 7900 THEN
        PERFORM pg_notify('clarion_registrations', '*');
    ELSE
        PERFORM pg_notify('clarion_registrations', keys::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER registrations_inserted_notice
    AFTER INSERT ON registrations REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION registrations_changed_notice();
CREATE TRIGGER registrations_updated_notice
    AFTER UPDATE ON registrations REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION registrations_changed_notice();
CREATE TRIGGER registrations_deleted_notice
    AFTER DELETE ON registrations REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION registrations_changed_notice();
