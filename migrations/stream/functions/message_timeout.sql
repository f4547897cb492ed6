-- A message's timeout in ms (docs/guide/configuration.md): its own options.timeout, else the group's
-- default, clamped to the group's bounds [p_min, p_max] (p_min NULL: no lower bound), as
-- resolveMessage() does in the library (timeoutBounds()). The one definition in SQL: claim_N sizes
-- a range's lease with it, reserve_exceptions_N a reservation and each run's lease.
-- LANGUAGE sql, IMMUTABLE, one expression, not STRICT: the planner inlines it into the calling
-- statement.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function by name; its operators and casts are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.message_timeout_{{N}}(
  p_options JSONB, p_default BIGINT, p_min BIGINT, p_max BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT LEAST(GREATEST(COALESCE((p_options->>'timeout')::bigint, p_default), p_min), p_max)
$fn$;
