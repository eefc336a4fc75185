-- Prepares migration V16 (registration app and locale) on a large
-- registrations table without blocking the service: run it with psql,
-- outside a transaction, before upgrading the coordinator.
--
--   psql "$CLARION_DATABASE_URL" -f deploy/sql/V16_prepare_online.sql
--
-- Both columns are catalogue-only changes. The index is built
-- CONCURRENTLY: writes go on meanwhile (it takes minutes per tens of
-- millions of rows). If it is interrupted it leaves an INVALID index: this
-- file drops such a leftover first, so running it again is safe. The
-- migration then only swaps the primary key.
\set ON_ERROR_STOP on

ALTER TABLE registrations
    ADD COLUMN IF NOT EXISTS app    text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS locale text;

SELECT 'DROP INDEX CONCURRENTLY registrations_app_harvest_key'
 WHERE EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indexrelid = to_regclass('registrations_app_harvest_key')
                  AND NOT i.indisvalid)
\gexec

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS registrations_app_harvest_key
    ON registrations (app, topic, shard, token) INCLUDE (platform, apns_environment, locale);
