-- Who did what: every send, cancel, release or discard of held tokens, and
-- every request made with an admin key. Written in the same transaction as
-- the action where the action is one; read newest first by id.
CREATE TABLE audit_log (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    -- Fingerprint of the key (12 hex characters), never the key.
    key_id   text        NOT NULL,
    -- The key's name in the keys file (its fingerprint otherwise).
    key_name text        NOT NULL,
    -- send, cancel, held.release, held.discard, admin.request
    action   text        NOT NULL,
    -- A notification id, or the method and path of an admin request.
    target   text        NOT NULL,
    -- What came of it, in a few words (replayed, counts, status code).
    detail   text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_action ON audit_log (action, id);
