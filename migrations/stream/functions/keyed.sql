-- Whether a message runs under its key's lease (docs/protocol/ordering.md#key-leases): it has a key
-- and its concurrency is exclusive or ordered (not parallel). Such a message waits for its key and
-- is chained behind the key's earlier ones; any other runs on its own.
-- LANGUAGE sql, IMMUTABLE, one expression, not STRICT: the planner inlines it into the calling
-- statement.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.keyed_{{N}}(p_key TEXT, p_concurrency TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT p_key IS NOT NULL AND p_concurrency <> 'parallel'
$fn$;
