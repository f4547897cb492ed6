-- Whether a range lease or a key lease has run out (docs/protocol/crash-recovery.md): a reclaim may
-- take an expired range over, a start or a take may take an expired key lease over, and maintain()
-- deletes expired key leases. Until then the lease is live.
-- LANGUAGE sql, STABLE (it reads now()), one expression, not STRICT: the planner inlines it into
-- the calling statement, so the lease expiry index serves it as it serves the expression written out.
-- search_path: not set, because a function with a SET clause is never inlined. Its built-in
-- functions are qualified with pg_catalog instead; its operators are resolved under the caller's
-- search_path.
CREATE OR REPLACE FUNCTION {{schema}}.lease_expired_{{N}}(p_expires_at TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE sql STABLE AS $fn$
  SELECT p_expires_at < pg_catalog.now()
$fn$;
