-- ordered_pred_N as plpgsql instead of a SQL function: a SQL-language function that is not
-- inlined is planned again at every call, and take_keys_N calls it once per ordered key of a
-- range (planning it at every call cost the ordered bench arm much of its rate). plpgsql caches the
-- plan of its statement per session. Same rule, same single statement (one snapshot), as in
-- 0004_per_key_order.sql (docs/ordering.md#the-predecessor-rule), with two probes skipped when
-- they cannot find anything: the caller's own lease, and unclaimed ids when there are none below.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_pred_{{N}}(
  p_group BIGINT, p_key TEXT, p_message_id BIGINT, p_own_low BIGINT, p_own_high BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (SELECT LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = p_key AND e.message_id < p_message_id
        AND e.status IN ('ready', 'inflight', 'deferred')),
    (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > l.low AND m.id <= l.high AND m.id < p_message_id
      WHERE l.consumer_group_id = p_group AND l.low < p_message_id
        -- Ranges are disjoint: a lease inside the caller's own range is its own (or what is left
        -- of it), so skipping it skips exactly the ids the chain orders itself, without a probe.
        AND NOT (l.low >= p_own_low AND l.high <= p_own_high)),
    (SELECT min(m.id) FROM {{schema}}.consumer_group_cursor_{{N}} cur
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > cur.claimed AND m.id < p_message_id
      WHERE cur.consumer_group_id = p_group AND cur.claimed < p_message_id - 1)));
END
$fn$;

-- take_keys_N runs the predecessor check once per ordered key of a range (up to batchLimit keys
-- in one call): it carries ordered_pred_N's statement inline, without the function call, which
-- keeps the ordered bench arm near its earlier rate. The statement must stay the same as the one
-- in ordered_pred_N above; every other caller calls ordered_pred_N.
CREATE OR REPLACE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, result TEXT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  r RECORD;
  v_pred BIGINT;
BEGIN
  FOR r IN SELECT x.k AS key, x.id, x.ordered, x.ms
             FROM jsonb_to_recordset(p_keys) AS x(k TEXT, id BIGINT, ordered BOOLEAN, ms BIGINT)
            ORDER BY x.k
  LOOP
    v_pred := NULL;
    IF r.ordered THEN
      SELECT LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = r.key AND e.message_id < r.id
        AND e.status IN ('ready', 'inflight', 'deferred')),
    (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = r.key AND m.id > l.low AND m.id <= l.high AND m.id < r.id
      WHERE l.consumer_group_id = p_group AND l.low < r.id
        -- Ranges are disjoint: a lease inside the caller's own range is its own (or what is left
        -- of it), so skipping it skips exactly the ids the chain orders itself, without a probe.
        AND NOT (l.low >= p_own_low AND l.high <= p_own_high)),
    (SELECT min(m.id) FROM {{schema}}.consumer_group_cursor_{{N}} cur
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = r.key AND m.id > cur.claimed AND m.id < r.id
      WHERE cur.consumer_group_id = p_group AND cur.claimed < r.id - 1)) INTO v_pred;
    END IF;
    k := r.key;
    IF v_pred IS NOT NULL THEN
      result := 'pred:' || v_pred;
    ELSE
      INSERT INTO {{schema}}.message_key_lease_{{N}} AS l (consumer_group_id, message_key, token, expires_at)
      VALUES (p_group, r.key, p_token, now() + r.ms * interval '1 millisecond')
      ON CONFLICT (consumer_group_id, message_key) DO UPDATE
         SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
       WHERE l.expires_at < now() OR l.token = EXCLUDED.token;
      result := CASE WHEN FOUND THEN NULL ELSE 'busy' END;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
