-- Prepares migration V35 (push-to-start registrations) on a large
-- registrations table without blocking the service: run it with psql,
-- outside a transaction, before upgrading the coordinator.
--
--   psql "$CLARION_DATABASE_URL" -f deploy/sql/V35_prepare_online.sql
--
-- Both columns are catalogue-only changes. The index is built
-- CONCURRENTLY: writes go on meanwhile. If it is interrupted it leaves an
-- INVALID index: this file drops such a leftover first, so running it
-- again is safe. The migration then only adds the checks (NOT VALID) and
-- swaps the primary key.
\set ON_ERROR_STOP on

ALTER TABLE registrations
    ADD COLUMN IF NOT EXISTS kind            text NOT NULL DEFAULT 'device',
    ADD COLUMN IF NOT EXISTS attributes_type text;

SELECT 'DROP INDEX CONCURRENTLY registrations_kind_harvest_key'
 WHERE EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indexrelid = to_regclass('registrations_kind_harvest_key')
                  AND NOT i.indisvalid)
\gexec

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS registrations_kind_harvest_key
    ON registrations (app, topic, shard, token) INCLUDE (platform, apns_environment, locale, kind);
