-- The committed cursor's target for a group (docs/protocol/poll-cycle.md#cursor-advance):
-- LEAST(claimed, lowest low of its range leases, lowest unresolved exception row − 1), NULLs
-- ignored, rows at or below committed (which only redrive() creates) not counted. STABLE, so it
-- reads with the snapshot of the statement that calls it (the load, advance_N's read). plpgsql,
-- which keeps its plan per session: a SQL function with subqueries is not inlined, and would be
-- planned again at every call.
CREATE OR REPLACE FUNCTION {{schema}}.cursor_target_{{N}}(p_group BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  RETURN (SELECT LEAST(cur.claimed,
                       (SELECT min(l.low) FROM {{schema}}.claim_lease_{{N}} l WHERE l.consumer_group_id = p_group),
                       (SELECT min(e.message_id) - 1 FROM {{schema}}.exception_queue_{{N}} e
                         WHERE e.consumer_group_id = p_group AND e.message_id > cur.committed
                           AND {{schema}}.unresolved_{{N}}(e.status)))
            FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group);
END
$fn$;
