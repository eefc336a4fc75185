-- Web push (issue 37): the third platform, and its subscriptions.
--
-- `platform_allowed` only ever grows (rows stored before must stay valid).
CREATE OR REPLACE FUNCTION platform_allowed(name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT name IN ('ios', 'android', 'web') $$;

-- A web registration's push subscription: the browser's PushSubscription
-- (`{"endpoint", "keys": {"p256dh", "auth"}}`, checked by the API), one row
-- per (app, token) however many topics it follows, so the registrations
-- table and its covering harvest key stay as they are. The harvest query
-- reads it for web rows only (a scalar subquery under CASE), through this
-- primary key.
CREATE TABLE web_subscriptions (
    app          text  NOT NULL,
    token        text  NOT NULL,
    subscription jsonb NOT NULL,
    PRIMARY KEY (app, token)
);

-- A subscription lives as long as its registration: whichever path deletes
-- a web token's last row (the API, a provider's cleanup, hygiene, a topic
-- removed) deletes its subscription in the same statement. Statement-level,
-- so a cleanup of a million iOS tokens costs one pass over the deleted
-- rows, not a trigger call per row.
CREATE FUNCTION web_subscriptions_follow_registrations() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM web_subscriptions w
     USING (SELECT DISTINCT app, token FROM gone WHERE platform = 'web') g
     WHERE w.app = g.app AND w.token = g.token
       AND NOT EXISTS (SELECT 1 FROM registrations r WHERE r.app = w.app AND r.token = w.token);
    RETURN NULL;
END $$;

CREATE TRIGGER web_subscriptions_follow_registrations
    AFTER DELETE ON registrations
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION web_subscriptions_follow_registrations();
