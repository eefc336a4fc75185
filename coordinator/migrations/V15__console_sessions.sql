-- Sessions of the newsroom console (`/console/`, issue 15).
--
-- An editor signs in with an API key once; the browser then holds only a
-- random session token in an HttpOnly cookie. The row keeps the SHA-256 of
-- that token (a leaked table cannot be replayed as cookies) and the SHA-256
-- of the key, so every request is answered with the key's scopes *as they
-- are now*: a key removed from the keys file ends its sessions at once.
CREATE TABLE console_sessions (
    token_digest bytea       PRIMARY KEY CHECK (length(token_digest) = 32),
    key_digest   bytea       NOT NULL CHECK (length(key_digest) = 32),
    -- Sent back in `X-CSRF-Token` with every request that changes anything.
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- Expired sessions are swept on sign-in.
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
