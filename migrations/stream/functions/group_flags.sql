-- What a group has to do besides claiming (docs/protocol/poll-cycle.md#load): paused, a range lease
-- to reclaim (lease_expired_N), runs to expire (run_expired_N), exception rows due (row_due_N).
-- The load reads it; so do claim_N and record_take_keys_N after a record, to end a chain on it.
-- One row, or none when the group does not exist.
-- LANGUAGE sql, STABLE, one SELECT, not STRICT: the planner inlines it into the calling
-- statement, with no function call.
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.group_flags_{{N}}(p_group BIGINT)
RETURNS TABLE (paused BOOLEAN, reclaimable BOOLEAN, expirable BOOLEAN, reservable BOOLEAN)
LANGUAGE sql STABLE AS $fn$
  SELECT g.paused,
         EXISTS (SELECT 1 FROM {{schema}}.claim_lease_{{N}} l
                  WHERE l.consumer_group_id = p_group AND {{schema}}.lease_expired_{{N}}(l.expires_at)),
         EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} e
                  WHERE e.consumer_group_id = p_group AND {{schema}}.run_expired_{{N}}(e.status, e.lease_expires_at)),
         EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} e
                  WHERE e.consumer_group_id = p_group
                    AND {{schema}}.row_due_{{N}}(e.status, e.can_run_after, e.lease_expires_at))
    FROM {{schema}}.consumer_group_config g WHERE g.id = p_group
$fn$;
