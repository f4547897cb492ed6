-- The predecessor rule for a group's later rows (start_exceptions_N): the lowest unresolved
-- predecessor of key p_key above the group's lead p_lead and below its last row p_high that is not
-- one of the group's rows p_rows, or NULL (docs/protocol/ordering.md#the-predecessor-rule). Below
-- the lead, take_key_N checked the lead itself. Unresolved: an exception row in ready, inflight or
-- deferred; a message inside one of the group's range leases (its outcome is not written yet); a
-- message not claimed yet.
-- plpgsql, so its statement is planned once per session: a LANGUAGE sql function that is not
-- inlined (it sets search_path) is planned again in every statement that calls it.
CREATE OR REPLACE FUNCTION {{schema}}.group_pred_{{N}}(
  p_group BIGINT, p_key TEXT, p_lead BIGINT, p_high BIGINT, p_rows BIGINT[])
RETURNS BIGINT
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  RETURN LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = p_key
        AND e.message_id > p_lead AND e.message_id < p_high AND e.message_id <> ALL (p_rows)
        AND e.status IN ('ready', 'inflight', 'deferred')),
    (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > l.low AND m.id <= l.high AND m.id > p_lead AND m.id < p_high
      WHERE l.consumer_group_id = p_group AND l.low < p_high AND l.high > p_lead),
    (SELECT min(m.id) FROM {{schema}}.consumer_group_cursor_{{N}} c
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > GREATEST(c.claimed, p_lead) AND m.id < p_high
      WHERE c.consumer_group_id = p_group));
END
$fn$;
