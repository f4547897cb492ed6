-- Whether an exception row is due to run (docs/protocol/poll-cycle.md#the-exception-phase): it
-- waits (row_waiting_N) and no live poll has it reserved (no lease, or lease_expired_N). The one
-- definition: the load, claim_N's and record_take_keys_N's record row (group_flags_N) and the
-- reservation (reserve_exceptions_N) ask it.
-- LANGUAGE sql, STABLE, one expression, not STRICT: the planner inlines it into the calling
-- statement.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.row_due_{{N}}(
  p_status TEXT, p_can_run_after TIMESTAMPTZ, p_lease_expires_at TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE sql STABLE AS $fn$
  SELECT {{schema}}.row_waiting_{{N}}(p_status, p_can_run_after)
     AND (p_lease_expires_at IS NULL OR {{schema}}.lease_expired_{{N}}(p_lease_expires_at))
$fn$;
