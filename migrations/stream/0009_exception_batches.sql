-- The exception path in batches (docs/poll-cycle.md#the-exception-phase): a poll starts the reserved
-- rows it is about to run and records their outcomes a batch at a time, one round trip (one
-- transaction) per batch instead of two transactions per row. Every row keeps its own guards:
-- a start needs the reservation token, an outcome needs the row's lease token.
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.
--
-- Results are typed columns from a fixed set, decoded once in packages/core/src/sql/results.ts.
-- A start that resolves a row without running it (superseded, deferred) writes nothing: the
-- caller records it like any other outcome (its text is written by the caller, in one place,
-- docs/exception-lifecycle.md#retries), still under the reservation token.

-- The per-row functions they replace are called by nothing any more.
DROP FUNCTION IF EXISTS {{schema}}.start_exception_{{N}}(BIGINT, BIGINT, UUID, UUID, BIGINT, BOOLEAN);
DROP FUNCTION IF EXISTS {{schema}}.record_exception_{{N}}(BIGINT, BIGINT, UUID, TEXT, UUID, TEXT, INTEGER, INTEGER, BIGINT, TEXT, TEXT, INTEGER, TEXT);

-- Start reserved rows, guarded per row by the reservation token p_token. p_rows is a JSON array
-- of {id, key_token, run_ms}: the row, the key lease token its run would hold (NULL for rows
-- without a key lease), and its run lease length. One result row per input row:
--   kind 'lost'       the row is not reserved under p_token (any more): nothing written;
--   kind 'started'    the row is inflight under p_token until now() + run_ms (and holds its key
--                     lease): the caller may run its handler. A row found already inflight under
--                     p_token was started by a repeat of this call whose reply was lost: started;
--   kind 'superseded' a compacted message that is no longer its key's head; ref = the head id
--                     (NULL: none);
--   kind 'deferred'   reason 'busy' (another run holds the key) or 'pred' (ref = the unresolved
--                     ordered predecessor, docs/ordering.md#the-predecessor-rule).
-- Rows are handled in key order, so concurrent callers take key leases in one order.
CREATE OR REPLACE FUNCTION {{schema}}.start_exceptions_{{N}}(
  p_group BIGINT, p_token UUID, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  x RECORD;
  r RECORD;
  v_rank BIGINT;
  v_head BIGINT;
  v_take TEXT;
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
      -- take_key_N: NULL (taken), 'busy' or 'pred:<id>' (the compaction check was made above).
      v_take := {{schema}}.take_key_{{N}}(p_group, r.message_key, x.key_token, x.run_ms, x.id,
                                          r.concurrency = 'ordered', 0, 0, false);
      IF v_take IS NOT NULL THEN
        kind := 'deferred';
        IF v_take = 'busy' THEN
          reason := 'busy';
        ELSIF v_take LIKE 'pred:%' THEN
          reason := 'pred';
          ref := substr(v_take, 6)::bigint;
        ELSE
          RAISE EXCEPTION 'unexpected take_key result %', v_take;
        END IF;
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

-- Record outcomes (docs/exception-lifecycle.md#retries), each guarded by its row's lease token
-- p_token (the run's, or the reservation's for a row resolved at start). p_rows is a JSON array of
-- {id, key, key_token, status ('deleted', 'ready', 'dead', 'deferred', 'superseded'), attempts,
-- delays, run_after_ms (NULL keeps can_run_after), last_error (NULL keeps it), dl_status,
-- dl_attempt, dl_error (dl_status NULL: no delivery-log row)}. Releases each run's key lease.
-- One result row per input row: kind 'lost' (the row lease was lost: nothing written for it),
-- 'recorded', or 'key_taken_over' (recorded, but the run's key lease had expired and been taken).
CREATE OR REPLACE FUNCTION {{schema}}.record_exceptions_{{N}}(
  p_group BIGINT, p_token UUID, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  x RECORD;
BEGIN
  FOR x IN SELECT j.* FROM jsonb_to_recordset(p_rows) AS j(
             id BIGINT, key TEXT, key_token UUID, status TEXT, attempts INTEGER, delays INTEGER,
             run_after_ms BIGINT, last_error TEXT, dl_status TEXT, dl_attempt INTEGER, dl_error TEXT)
           ORDER BY j.key NULLS FIRST, j.id
  LOOP
    message_id := x.id;
    kind := 'recorded';
    IF x.status = 'deleted' THEN
      DELETE FROM {{schema}}.exception_queue_{{N}} e
       WHERE e.consumer_group_id = p_group AND e.message_id = x.id AND e.lease_token = p_token;
    ELSE
      UPDATE {{schema}}.exception_queue_{{N}} e
         SET status = x.status, attempts = x.attempts, delays = x.delays,
             can_run_after = CASE WHEN x.run_after_ms IS NULL THEN e.can_run_after
                                  ELSE now() + x.run_after_ms * interval '1 millisecond' END,
             last_error = COALESCE(x.last_error, e.last_error),
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
       WHERE e.consumer_group_id = p_group AND e.message_id = x.id AND e.lease_token = p_token;
    END IF;
    IF NOT FOUND THEN
      kind := 'lost';
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF x.key_token IS NOT NULL THEN
      DELETE FROM {{schema}}.message_key_lease_{{N}} l
       WHERE l.consumer_group_id = p_group AND l.message_key = x.key AND l.token = x.key_token;
      IF NOT FOUND THEN kind := 'key_taken_over'; END IF;
    END IF;
    IF x.dl_status IS NOT NULL THEN
      INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
      VALUES (p_group, x.id, x.dl_attempt, x.dl_status, x.dl_error);
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- One round trip of the exception phase: record p_outcomes, then start p_starts (either may be
-- an empty array), in one transaction. Result rows: step 'record' (kind as record_exceptions_N)
-- and step 'start' (kind, reason, ref as start_exceptions_N). Recording first frees the key
-- leases of finished runs before the starts take theirs.
CREATE OR REPLACE FUNCTION {{schema}}.exception_step_{{N}}(
  p_group BIGINT, p_token UUID, p_outcomes JSONB, p_starts JSONB)
RETURNS TABLE (step TEXT, message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF jsonb_array_length(p_outcomes) > 0 THEN
    RETURN QUERY SELECT 'record'::text, r.message_id, r.kind, NULL::text, NULL::bigint
                   FROM {{schema}}.record_exceptions_{{N}}(p_group, p_token, p_outcomes) r;
  END IF;
  IF jsonb_array_length(p_starts) > 0 THEN
    RETURN QUERY SELECT 'start'::text, s.message_id, s.kind, s.reason, s.ref
                   FROM {{schema}}.start_exceptions_{{N}}(p_group, p_token, p_starts) s;
  END IF;
END
$fn$;
