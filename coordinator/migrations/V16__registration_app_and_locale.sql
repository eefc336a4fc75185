-- Registrations carry their app (issue 16: several apps in one
-- installation; every existing row is app `default`) and the device's
-- language tag (lower case BCP 47, NULL when the app did not say), and the
-- harvest key gains both so the harvest stays an index-only scan:
--   WHERE app = $1 AND topic = $2 AND shard >= $3 AND shard < $4
-- reading token, platform, apns_environment and locale from the key alone.
--
-- Online: adding a column with a constant default (and a nullable one)
-- changes only the catalogue, whatever the table's size. The new key is
-- the one step that reads the whole table. On a large table build it
-- beforehand, without blocking writes, with
-- deploy/sql/V16_prepare_online.sql (psql, outside a transaction): this
-- migration then finds it built (IF NOT EXISTS) and only swaps the primary
-- key, a catalogue change under a brief lock.
ALTER TABLE registrations
    ADD COLUMN IF NOT EXISTS app    text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS locale text;

CREATE UNIQUE INDEX IF NOT EXISTS registrations_app_harvest_key
    ON registrations (app, topic, shard, token) INCLUDE (platform, apns_environment, locale);

ALTER TABLE registrations
    DROP CONSTRAINT registrations_pkey,
    ADD CONSTRAINT registrations_pkey PRIMARY KEY USING INDEX registrations_app_harvest_key;
