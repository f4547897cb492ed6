-- Committed cursor advance (docs/protocol/poll-cycle.md#cursor-advance): one read of the group's target
-- (cursor_target_N) and of committed in the same statement, then a guarded write of the target.
-- Returns the committed cursor afterwards.
CREATE OR REPLACE FUNCTION {{schema}}.advance_{{N}}(p_group BIGINT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_target BIGINT;
  v_committed BIGINT;
BEGIN
  SELECT {{schema}}.cursor_target_{{N}}(p_group), cur.committed
    INTO v_target, v_committed
    FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group;
  IF v_target > v_committed THEN
    UPDATE {{schema}}.consumer_group_cursor_{{N}} SET committed = v_target, updated_at = now()
     WHERE consumer_group_id = p_group AND committed < v_target;
    RETURN v_target;
  END IF;
  RETURN v_committed;
END
$fn$;
