-- Whether an exception row's run has run out (docs/protocol/exception-lifecycle.md): inflight and
-- past its run lease; the poll's expiry step resolves it.
-- LANGUAGE sql, STABLE (it reads now()), one expression, not STRICT: the planner inlines it into
-- the calling statement.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.run_expired_{{N}}(p_status TEXT, p_lease_expires_at TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE sql STABLE AS $fn$
  SELECT p_status = 'inflight' AND {{schema}}.lease_expired_{{N}}(p_lease_expires_at)
$fn$;
