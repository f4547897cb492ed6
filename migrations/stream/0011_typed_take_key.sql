-- take_key_N with typed columns, like every other protocol function (docs/poll-cycle.md#dispatch):
-- kind 'taken', 'busy', 'pred' (ref = the unresolved ordered predecessor) or 'superseded' (ref =
-- the key's head, NULL: none), decoded once in packages/core/src/sql/results.ts. Its result text
-- ('pred:<id>', 'superseded:<id>') was the last one a caller had to parse. The one caller in SQL,
-- start_exceptions_N, is restated from 0010_exception_batches.sql with only its call to take_key_N
-- changed.
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.

DROP FUNCTION IF EXISTS {{schema}}.take_key_{{N}}(BIGINT, TEXT, UUID, BIGINT, BIGINT, BOOLEAN, BIGINT, BIGINT, BOOLEAN);

-- The lease of one key: the compaction head check (docs/poll-cycle.md#dispatch step 4), then
-- take_keys_N for its one key (docs/ordering.md#key-leases).
CREATE FUNCTION {{schema}}.take_key_{{N}}(
  p_group BIGINT, p_key TEXT, p_token UUID, p_ms BIGINT, p_message_id BIGINT,
  p_ordered BOOLEAN, p_own_low BIGINT, p_own_high BIGINT, p_compacted BOOLEAN)
RETURNS TABLE (kind TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
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

CREATE OR REPLACE FUNCTION {{schema}}.start_exceptions_{{N}}(
  p_group BIGINT, p_token UUID, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  x RECORD;
  r RECORD;
  v_rank BIGINT;
  v_head BIGINT;
  v_take RECORD;
BEGIN
  FOR x IN SELECT j.id, j.key_token, j.run_ms, e.message_key AS k
             FROM jsonb_to_recordset(p_rows) AS j(id BIGINT, key_token UUID, run_ms BIGINT)
             LEFT JOIN {{schema}}.exception_queue_{{N}} e
               ON e.consumer_group_id = p_group AND e.message_id = j.id
            ORDER BY e.message_key NULLS FIRST, j.id
  LOOP
    message_id := x.id;
    reason := NULL;
    ref := NULL;
    SELECT e.message_key, e.concurrency, e.status INTO r FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group AND e.message_id = x.id AND e.lease_token = p_token
       AND e.status IN ('ready', 'deferred', 'inflight')
     FOR UPDATE;
    IF NOT FOUND THEN
      kind := 'lost';
      RETURN NEXT;
      CONTINUE;
    END IF;
    -- Only this function makes a row inflight under the reservation token.
    IF r.status = 'inflight' THEN
      kind := 'started';
      RETURN NEXT;
      CONTINUE;
    END IF;
    SELECT m.compaction_rank INTO v_rank FROM {{schema}}.message_log_{{N}} m WHERE m.id = x.id;
    IF NOT FOUND THEN
      kind := 'lost';
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_rank IS NOT NULL THEN
      SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = r.message_key;
      IF v_head IS DISTINCT FROM x.id THEN
        kind := 'superseded';
        ref := v_head;
        RETURN NEXT;
        CONTINUE;
      END IF;
    END IF;
    IF r.concurrency IN ('exclusive', 'ordered') AND r.message_key IS NOT NULL THEN
      -- take_key_N: kind 'taken', 'busy' or 'pred' (ref = the predecessor); the compaction check
      -- was made above.
      SELECT t.kind, t.ref INTO v_take
        FROM {{schema}}.take_key_{{N}}(p_group, r.message_key, x.key_token, x.run_ms, x.id,
                                       r.concurrency = 'ordered', 0, 0, false) t;
      IF v_take.kind <> 'taken' THEN
        kind := 'deferred';
        reason := v_take.kind;
        ref := v_take.ref;
        RETURN NEXT;
        CONTINUE;
      END IF;
    END IF;
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET status = 'inflight', lease_expires_at = now() + x.run_ms * interval '1 millisecond', updated_at = now()
     WHERE e.consumer_group_id = p_group AND e.message_id = x.id;
    kind := 'started';
    RETURN NEXT;
  END LOOP;
END
$fn$;
