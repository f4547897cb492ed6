-- Start reserved rows, guarded per row by the reservation token p_token
-- (docs/protocol/poll-cycle.md#batched-starts-and-records). p_rows is a JSON array of {id, key_token,
-- run_ms, lead}: the row, the key lease token its run would hold (NULL for rows without a key lease),
-- its run lease length, and, for a later row of a group (lead: the group's first row, of the same
-- key, below it), the row it follows. A group's later rows take no key lease of their own: they
-- start (start_followers_N, together) only when their lead started in this call, every row before
-- them in the group started, and no unresolved predecessor outside the group lies below them
-- (group_pred_N, ordered keys: an exception row, a message in a range lease or one not claimed
-- yet); they then run after the lead, one after another, under its key lease. One result row per input row:
--   kind 'lost'       the row is not reserved under p_token (any more): nothing written;
--   kind 'started'    the row is inflight under p_token until now() + run_ms (and holds its key
--                     lease): the caller may run its handler. A row found already inflight under
--                     p_token was started by a repeat of this call whose reply was lost: started;
--   kind 'expired'    the message expired before this start (expires_in_N, docs/guide/producing.md#expiry)
--                     and the row was not redriven since (expiry_waived);
--   kind 'superseded' a compacted message that is no longer its key's head; ref = the head id
--                     (NULL: none);
--   kind 'deferred'   reason 'busy' (another run holds the key) or 'pred' (ref = the unresolved
--                     ordered predecessor, docs/protocol/ordering.md#the-predecessor-rule).
-- A start that resolves a row without running it writes nothing: the caller records it like any
-- other outcome, still under the reservation token. One transaction, in two steps:
--   1. the plain rows (no key lease to take, no compaction head to check, no expiry passed) are looked up by primary
--      key and locked in message id order (a row changed meanwhile is read again and checked
--      again, as a locking SELECT does), then made inflight in one UPDATE;
--   2. every other row (keyed, compacted, expired, already inflight, or not under the token) goes through
--      a loop in key order, so concurrent callers take key leases in one order.
CREATE OR REPLACE FUNCTION {{schema}}.start_exceptions_{{N}}(
  p_group BIGINT, p_token UUID, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  x RECORD;
  v_lead BIGINT;
  v_cut BIGINT;
  v_high BIGINT;
  v_group BIGINT[];
  v_done BIGINT;
  v_followers JSONB;
  r RECORD;
  v_rank BIGINT;
  v_left FLOAT8;
  v_head BIGINT;
  v_take RECORD;
  v_started BIGINT[];
  v_ms BIGINT[];
BEGIN
  -- The plain rows, each by primary key, locked in message id order. A lateral lookup (OFFSET 0
  -- keeps it one) is the plan whatever the statistics say; a join let the planner read the group's
  -- `due` index instead.
  SELECT COALESCE(array_agg(e.message_id ORDER BY e.message_id), '{}'), COALESCE(array_agg(i.ms ORDER BY e.message_id), '{}')
    INTO v_started, v_ms
    FROM (SELECT j.id, j.run_ms AS ms FROM jsonb_to_recordset(p_rows) AS j(id BIGINT, key_token UUID, run_ms BIGINT)
           ORDER BY j.id) i
   CROSS JOIN LATERAL (SELECT e.message_id
                         FROM {{schema}}.exception_queue_{{N}} e
                        WHERE e.consumer_group_id = p_group AND e.message_id = i.id
                          AND e.lease_token = p_token AND e.status IN ('ready', 'deferred')
                          AND NOT {{schema}}.keyed_{{N}}(e.message_key, e.concurrency)
                          AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m
                                       WHERE m.id = e.message_id AND m.compaction_rank IS NULL
                                         AND (e.expiry_waived OR NOT COALESCE({{schema}}.expires_in_{{N}}(m.options, m.created_at) <= 0, false)))
                        OFFSET 0
                          FOR UPDATE OF e) e;
  IF cardinality(v_started) > 0 THEN
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET status = 'inflight', lease_expires_at = now() + i.ms * interval '1 millisecond', updated_at = now()
      FROM unnest(v_started, v_ms) AS i(id, ms)
     WHERE e.consumer_group_id = p_group AND e.message_id = ANY (v_started) AND e.message_id = i.id;
  END IF;

  RETURN QUERY SELECT u.id, 'started'::text, NULL::text, NULL::bigint FROM unnest(v_started) AS u(id);

  FOR x IN SELECT j.id, j.key_token, j.run_ms, j.lead,
                  (SELECT e.message_key FROM {{schema}}.exception_queue_{{N}} e
                    WHERE e.consumer_group_id = p_group AND e.message_id = j.id) AS k
             FROM jsonb_to_recordset(p_rows) AS j(id BIGINT, key_token UUID, run_ms BIGINT, lead BIGINT)
            WHERE j.id <> ALL (v_started)
            ORDER BY k NULLS FIRST, j.id
  LOOP
    message_id := x.id;
    reason := NULL;
    ref := NULL;
    IF x.lead IS NOT NULL THEN
      -- A group's later rows start together, when the first of them comes up (start_followers_N).
      IF v_done IS DISTINCT FROM x.lead THEN
        v_done := x.lead;
        v_cut := NULL;
        IF v_lead IS NOT DISTINCT FROM x.lead AND r.concurrency = 'ordered' THEN
          SELECT max(j.id), array_agg(j.id) INTO v_high, v_group
            FROM jsonb_to_recordset(p_rows) AS j(id BIGINT, lead BIGINT) WHERE j.lead = x.lead;
          v_cut := {{schema}}.group_pred_{{N}}(p_group, r.message_key, x.lead, v_high, v_group);
        END IF;
        SELECT COALESCE(jsonb_object_agg(f.message_id::text, jsonb_build_object('kind', f.kind, 'reason', f.reason, 'ref', f.ref)), '{}')
          INTO v_followers
          FROM {{schema}}.start_followers_{{N}}(p_group, p_token, x.lead, v_lead IS NOT DISTINCT FROM x.lead, v_cut, p_rows) f;
      END IF;
      kind := v_followers -> x.id::text ->> 'kind';
      reason := v_followers -> x.id::text ->> 'reason';
      ref := (v_followers -> x.id::text ->> 'ref')::bigint;
      RETURN NEXT;
      CONTINUE;
    END IF;
    v_lead := NULL;
    SELECT e.message_key, e.concurrency, e.status, e.expiry_waived INTO r FROM {{schema}}.exception_queue_{{N}} e
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
      v_lead := x.id;
      RETURN NEXT;
      CONTINUE;
    END IF;
    SELECT m.compaction_rank, {{schema}}.expires_in_{{N}}(m.options, m.created_at) INTO v_rank, v_left
      FROM {{schema}}.message_log_{{N}} m WHERE m.id = x.id;
    IF NOT FOUND THEN
      kind := 'lost';
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_left <= 0 AND NOT r.expiry_waived THEN
      kind := 'expired';
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
    IF {{schema}}.keyed_{{N}}(r.message_key, r.concurrency) THEN
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
    v_lead := x.id;
    RETURN NEXT;
  END LOOP;
END
$fn$;
