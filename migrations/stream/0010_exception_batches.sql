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

-- Reserve due rows and start the first of them, in one round trip (docs/poll-cycle.md#the-exception-phase
-- steps 2 and 3). The reservation is the one the phase always made: up to p_limit rows in id
-- order, FOR UPDATE SKIP LOCKED, `ready` and due or `deferred`, not reserved by a live poll, whose
-- message exists, whose key is not leased (only the lowest waiting row per key, decided before
-- the limit), that pass the predecessor rule (ordered_pred_N); reserved for lease_ms_N
-- (Tmax × ceil(n / p_conc) + p_margin, capped at p_cap) under p_token, nothing else changed.
-- Then the first p_start reserved rows in id order (rows of a key in p_skip_keys left out: an
-- abandoned run of the key still runs in the caller's process) are started by start_exceptions_N,
-- each with a run lease of its timeout + p_margin (capped at p_cap) and, when keyed, a key lease
-- token of its own; when p_budget is not NULL (ms left before the caller's deadline), starting stops
-- at the first row whose timeout + p_margin does not fit, as the caller's own deadline check does.
-- Returns every reserved row with its message; kind/reason/ref as start_exceptions_N for the rows
-- it started (kind NULL: left reserved for the caller to start or release), and key_token/run_ms.
-- p_tdef/p_tmin/p_tmax resolve a message's timeout as resolveMessage() does (timeoutBounds()).
CREATE OR REPLACE FUNCTION {{schema}}.reserve_exceptions_{{N}}(
  p_group BIGINT, p_limit INTEGER, p_tdef BIGINT, p_tmin BIGINT, p_tmax BIGINT, p_conc INTEGER,
  p_margin BIGINT, p_cap BIGINT, p_token UUID, p_start INTEGER, p_budget BIGINT, p_skip_keys TEXT[],
  p_repeat BOOLEAN)
RETURNS TABLE (message_id BIGINT, message_key TEXT, concurrency TEXT, attempts INTEGER, delays INTEGER,
               payload JSONB, options JSONB, compaction_rank BIGINT, created_at TIMESTAMPTZ,
               kind TEXT, reason TEXT, ref BIGINT, key_token UUID, run_ms BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
  v_ids BIGINT[];
  v_starts JSONB;
  v_started JSONB := '[]'::jsonb;
BEGIN
  -- A repeat after a lost reply (p_repeat) finds its own reservation, the rows under p_token, and
  -- reserves nothing more; its starts are repeated too, which start_exceptions_N answers as before.
  IF p_repeat THEN
    SELECT array_agg(e.message_id ORDER BY e.message_id) INTO v_ids
      FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group AND e.lease_token = p_token;
  END IF;
  IF v_ids IS NULL THEN
  WITH cand AS (
    SELECT e.message_id, e.message_key, e.concurrency
      FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group
       AND ((e.status = 'ready' AND e.can_run_after <= now()) OR e.status = 'deferred')
       AND (e.lease_expires_at IS NULL OR e.lease_expires_at < now())
       AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = e.message_id)
       AND (e.concurrency = 'parallel' OR e.message_key IS NULL OR (
             NOT EXISTS (SELECT 1 FROM {{schema}}.message_key_lease_{{N}} k
                          WHERE k.consumer_group_id = p_group AND k.message_key = e.message_key
                            AND k.expires_at >= now())
             -- Only the lowest waiting row per key, decided before LIMIT: otherwise one key's
             -- backlog fills the batch and the per-key pick below leaves a single row to run.
             AND NOT EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} w
                              WHERE w.consumer_group_id = p_group AND w.message_key = e.message_key
                                AND w.message_id < e.message_id AND w.concurrency <> 'parallel'
                                AND ((w.status = 'ready' AND w.can_run_after <= now()) OR w.status = 'deferred'))
             -- The predecessor rule, per key (docs/ordering.md#the-predecessor-rule).
             AND (e.concurrency <> 'ordered'
                  OR {{schema}}.ordered_pred_{{N}}(p_group, e.message_key, e.message_id, 0, 0) IS NULL)))
     ORDER BY e.message_id
     LIMIT p_limit
     FOR UPDATE OF e SKIP LOCKED
  ), pick AS (
    SELECT x.message_id FROM (
      SELECT cand.*, row_number() OVER (
               PARTITION BY CASE WHEN cand.concurrency <> 'parallel' THEN cand.message_key END
               ORDER BY cand.message_id) AS rn
        FROM cand) x
     WHERE x.rn = 1 OR x.concurrency = 'parallel' OR x.message_key IS NULL
  ), len AS (
    SELECT {{schema}}.lease_ms_{{N}}(max(LEAST(GREATEST(COALESCE((m.options->>'timeout')::bigint, p_tdef), p_tmin), p_tmax)),
                                     count(*), p_conc, p_margin, p_cap) AS ms
      FROM pick p JOIN {{schema}}.message_log_{{N}} m ON m.id = p.message_id
  ), upd AS (
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET lease_token = p_token, lease_expires_at = now() + (SELECT l.ms FROM len l) * interval '1 millisecond'
      FROM pick p
     WHERE e.consumer_group_id = p_group AND e.message_id = p.message_id
    RETURNING e.message_id
  )
  SELECT array_agg(u.message_id ORDER BY u.message_id) INTO v_ids FROM upd u;
  END IF;
  IF v_ids IS NULL THEN RETURN; END IF;
  WITH ord AS (
    SELECT e.message_id AS id, e.message_key AS k, e.concurrency AS c,
           LEAST(GREATEST(COALESCE((m.options->>'timeout')::bigint, p_tdef), p_tmin), p_tmax) AS tmo,
           row_number() OVER (ORDER BY e.message_id) AS rn
      FROM unnest(v_ids) AS i(id)
      JOIN {{schema}}.exception_queue_{{N}} e ON e.consumer_group_id = p_group AND e.message_id = i.id
      JOIN {{schema}}.message_log_{{N}} m ON m.id = i.id
     WHERE e.concurrency = 'parallel' OR e.message_key IS NULL OR NOT (e.message_key = ANY (p_skip_keys))
  ), cut AS (
    SELECT COALESCE(min(o.rn), 9223372036854775807) AS rn FROM ord o WHERE o.tmo + p_margin > p_budget
  )
  -- The key lease token is derived from the reservation token and the row, so a repeat of this
  -- call after a lost reply names the lease its first call took.
  SELECT COALESCE(jsonb_agg(jsonb_build_object(
           'id', o.id,
           'key_token', CASE WHEN o.c <> 'parallel' AND o.k IS NOT NULL THEN md5(p_token::text || ':' || o.id)::uuid END,
           'run_ms', LEAST(o.tmo + p_margin, COALESCE(p_cap, 9223372036854775807))) ORDER BY o.id), '[]'::jsonb)
    INTO v_starts
    FROM ord o, cut x WHERE o.rn <= p_start AND o.rn < x.rn;
  IF jsonb_array_length(v_starts) > 0 THEN
    SELECT COALESCE(jsonb_agg(to_jsonb(s)), '[]'::jsonb) INTO v_started
      FROM {{schema}}.start_exceptions_{{N}}(p_group, p_token, v_starts) s;
  END IF;
  RETURN QUERY
    SELECT e.message_id, e.message_key, e.concurrency, e.attempts, e.delays,
           m.payload, m.options, m.compaction_rank, m.created_at,
           s.kind, s.reason, s.ref, st.key_token, st.run_ms
      FROM unnest(v_ids) AS i(id)
      JOIN {{schema}}.exception_queue_{{N}} e ON e.consumer_group_id = p_group AND e.message_id = i.id
      JOIN {{schema}}.message_log_{{N}} m ON m.id = i.id
      LEFT JOIN jsonb_to_recordset(v_starts) AS st(id BIGINT, key_token UUID, run_ms BIGINT) ON st.id = i.id
      LEFT JOIN jsonb_to_recordset(v_started) AS s(message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
        ON s.message_id = i.id
     ORDER BY i.id;
END
$fn$;
