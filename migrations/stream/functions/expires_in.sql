-- A message's expiry (docs/guide/producing.md#expiry) as milliseconds left by the database clock
-- (negative: expired; NULL: the message never expires). Stored in message_log_N.options as
-- "expiresAt" (epoch ms) or "ttl" (ms after created_at, the database's now() at the insert).
-- The one definition: the claim's read, the reclaim's read and start_exceptions_N use it.
-- search_path: not set, because a function with a SET clause is never inlined, and it runs once
-- per message read. Its built-in functions are qualified with pg_catalog instead; its operators
-- are resolved under the caller's search_path, which is pg_catalog, pg_temp in every caller.
CREATE OR REPLACE FUNCTION {{schema}}.expires_in_{{N}}(p_options JSONB, p_created_at TIMESTAMPTZ)
RETURNS FLOAT8
LANGUAGE sql STABLE AS $fn$
  SELECT CASE WHEN p_options IS NULL THEN NULL
              ELSE COALESCE((p_options ->> 'expiresAt')::float8,
                            pg_catalog.date_part('epoch', p_created_at) * 1000 + (p_options ->> 'ttl')::float8)
                   - pg_catalog.date_part('epoch', pg_catalog.now()) * 1000 END
$fn$;
