-- Whether an exception row is unresolved (docs/protocol/exception-lifecycle.md): ready (due or in
-- backoff), deferred or inflight. Dead and superseded rows are resolved. An unresolved row holds
-- the committed cursor (cursor_target_N) and the retention floor below it, and blocks its key's
-- later ordered messages (ordered_preds_N).
-- LANGUAGE sql, IMMUTABLE, one expression, not STRICT: the planner inlines it into the calling
-- statement, so an index on status serves it as it serves the expression written out.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.unresolved_{{N}}(p_status TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT p_status IN ('ready', 'inflight', 'deferred')
$fn$;
