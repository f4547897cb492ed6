-- Per-key ordering (docs/ordering.md#the-predecessor-rule): an ordered message waits only for
-- earlier unresolved messages of its own key, never for the group's committed cursor, which any
-- other key's unresolved message can hold back.
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.

-- The lowest unresolved predecessor of message p_message_id of key p_key for the group, or NULL.
-- Unresolved: an exception row of the key below the message in ready, inflight or deferred; a
-- message of the key below it inside a range lease of the group (in flight, released or expired:
-- its outcome is not written yet) other than the caller's own range (p_own_low, p_own_high],
-- whose chain orders its members itself; or one not claimed yet (after a seek back). dead and
-- superseded rows are resolved. One statement, so one snapshot: a range recording (which deletes
-- its lease and writes its exception rows in one transaction) is seen either before or after.
-- The one definition of the rule: take_key_N, take_keys_N (so start_exception_N) and the
-- reservation statement all call it.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_pred_{{N}}(
  p_group BIGINT, p_key TEXT, p_message_id BIGINT, p_own_low BIGINT, p_own_high BIGINT)
RETURNS BIGINT
LANGUAGE sql STABLE AS $fn$
  SELECT LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = p_key AND e.message_id < p_message_id
        AND e.status IN ('ready', 'inflight', 'deferred')),
    (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > l.low AND m.id <= l.high AND m.id < p_message_id
      WHERE l.consumer_group_id = p_group AND l.low < p_message_id
        AND NOT (m.id > p_own_low AND m.id <= p_own_high)),
    (SELECT min(m.id) FROM {{schema}}.consumer_group_cursor_{{N}} cur
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = p_key AND m.id > cur.claimed AND m.id < p_message_id
      WHERE cur.consumer_group_id = p_group))
$fn$;

-- As in 0001, with the predecessor check of ordered_pred_N.
CREATE OR REPLACE FUNCTION {{schema}}.take_key_{{N}}(
  p_group BIGINT, p_key TEXT, p_token UUID, p_ms BIGINT, p_message_id BIGINT,
  p_ordered BOOLEAN, p_own_low BIGINT, p_own_high BIGINT, p_compacted BOOLEAN)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_head BIGINT;
  v_pred BIGINT;
BEGIN
  IF p_compacted THEN
    SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = p_key;
    IF v_head IS DISTINCT FROM p_message_id THEN
      RETURN 'superseded:' || COALESCE(v_head::text, 'none');
    END IF;
  END IF;
  IF p_ordered THEN
    v_pred := {{schema}}.ordered_pred_{{N}}(p_group, p_key, p_message_id, p_own_low, p_own_high);
    IF v_pred IS NOT NULL THEN RETURN 'pred:' || v_pred; END IF;
  END IF;
  INSERT INTO {{schema}}.message_key_lease_{{N}} AS k (consumer_group_id, message_key, token, expires_at)
  VALUES (p_group, p_key, p_token, now() + p_ms * interval '1 millisecond')
  ON CONFLICT (consumer_group_id, message_key) DO UPDATE
     SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
   WHERE k.expires_at < now() OR k.token = EXCLUDED.token;
  IF NOT FOUND THEN RETURN 'busy'; END IF;
  RETURN NULL;
END
$fn$;

-- As in 0001, with the predecessor check of ordered_pred_N.
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
      v_pred := {{schema}}.ordered_pred_{{N}}(p_group, r.key, r.id, p_own_low, p_own_high);
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
