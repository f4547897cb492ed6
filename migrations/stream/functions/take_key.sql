-- The lease of one key: the compaction head check (docs/protocol/poll-cycle.md#dispatch step 4), then
-- take_keys_N for its one key (docs/protocol/ordering.md#key-leases).
CREATE FUNCTION {{schema}}.take_key_{{N}}(
  p_group BIGINT, p_key TEXT, p_token UUID, p_ms BIGINT, p_message_id BIGINT,
  p_ordered BOOLEAN, p_own_low BIGINT, p_own_high BIGINT, p_compacted BOOLEAN)
RETURNS TABLE (kind TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_head BIGINT;
  r RECORD;
BEGIN
  IF p_compacted THEN
    SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = p_key;
    IF v_head IS DISTINCT FROM p_message_id THEN
      kind := 'superseded';
      ref := v_head;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  SELECT t.kind, t.pred_id INTO r
    FROM {{schema}}.take_keys_{{N}}(p_group, p_token, p_own_low, p_own_high,
           jsonb_build_array(jsonb_build_object('k', p_key, 'id', p_message_id, 'ordered', p_ordered, 'ms', p_ms))) t;
  IF FOUND THEN
    kind := r.kind;
    ref := r.pred_id;
  ELSE
    kind := 'taken';
    ref := NULL;
  END IF;
  RETURN NEXT;
END
$fn$;
