-- Whether an exception row waits to run (docs/protocol/exception-lifecycle.md): ready and past its
-- can_run_after, or deferred, whether or not a poll has reserved it. row_due_N adds "not reserved".
-- LANGUAGE sql, STABLE (it reads now()), one expression, not STRICT: the planner
-- inlines it into the calling statement, so an index on (status, can_run_after) serves it as it
-- serves the expression written out.
-- search_path: not set, because a function with a SET clause is never inlined. Its built-in
-- functions are qualified with pg_catalog instead; its operators are resolved under the caller's
-- search_path.
CREATE OR REPLACE FUNCTION {{schema}}.row_waiting_{{N}}(p_status TEXT, p_can_run_after TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE sql STABLE AS $fn$
  SELECT (p_status = 'ready' AND p_can_run_after <= pg_catalog.now()) OR p_status = 'deferred'
$fn$;
