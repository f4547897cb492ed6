-- Reserve due rows and start the first of them, in one round trip (docs/protocol/poll-cycle.md#the-exception-phase
-- steps 2 and 3). The reservation is the one the phase always made: up to p_limit rows in id
-- order, FOR UPDATE SKIP LOCKED, `ready` and due or `deferred`, not reserved by a live poll, whose
-- message exists, whose key is not leased (only the lowest waiting row per key, decided before
-- the limit), that pass the predecessor rule (ordered_pred_N); then, within the limit, the later
-- waiting rows of each exclusive/ordered key picked (its chain); reserved for lease_ms_N
-- (Tmax × max(ceil(n / p_conc), longest chain) + p_margin, capped at p_cap) under p_token,
-- nothing else changed.
-- Then the first p_start reserved rows in id order (rows of a key in p_skip_keys left out: an
-- abandoned run of the key still runs in the caller's process; a chain's later rows left out) are started by start_exceptions_N,
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
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_ids BIGINT[];
  v_starts JSONB;
  v_started JSONB := '[]'::jsonb;
BEGIN
  -- A repeat after a lost reply (p_repeat) finds its own reservation, the rows under p_token, and
  -- reserves nothing more; its starts are repeated too, which start_exceptions_N answers for a row already inflight: started.
  IF p_repeat THEN
    SELECT array_agg(e.message_id ORDER BY e.message_id) INTO v_ids
      FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group AND e.lease_token = p_token;
  END IF;
  IF v_ids IS NULL THEN
  WITH cand AS (
    SELECT e.message_id, e.message_key, e.concurrency
      FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group
       AND {{schema}}.row_due_{{N}}(e.status, e.can_run_after, e.lease_expires_at)
       AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = e.message_id)
       AND (NOT {{schema}}.keyed_{{N}}(e.message_key, e.concurrency) OR (
             NOT EXISTS (SELECT 1 FROM {{schema}}.message_key_lease_{{N}} k
                          WHERE k.consumer_group_id = p_group AND k.message_key = e.message_key
                            AND NOT {{schema}}.lease_expired_{{N}}(k.expires_at))
             -- Only the lowest waiting row per key, decided before LIMIT: otherwise one key's
             -- backlog fills the batch and the per-key pick below leaves a single row to run.
             AND NOT EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} w
                              WHERE w.consumer_group_id = p_group AND w.message_key = e.message_key
                                AND w.message_id < e.message_id AND {{schema}}.keyed_{{N}}(w.message_key, w.concurrency)
                                AND {{schema}}.row_waiting_{{N}}(w.status, w.can_run_after))
             -- The predecessor rule, per key (docs/protocol/ordering.md#the-predecessor-rule).
             AND (e.concurrency <> 'ordered'
                  OR {{schema}}.ordered_pred_{{N}}(p_group, e.message_key, e.message_id, 0, 0) IS NULL)))
     ORDER BY e.message_id
     LIMIT p_limit
     FOR UPDATE OF e SKIP LOCKED
  ), pick AS (
    SELECT x.message_id FROM (
      SELECT cand.*, row_number() OVER (
               PARTITION BY CASE WHEN {{schema}}.keyed_{{N}}(cand.message_key, cand.concurrency) THEN cand.message_key END
               ORDER BY cand.message_id) AS rn
        FROM cand) x
     WHERE x.rn = 1 OR NOT {{schema}}.keyed_{{N}}(x.message_key, x.concurrency)
  ), follow AS (
    -- A key's chain: the waiting rows of each picked exclusive/ordered key after its first, in id
    -- order, up to the batch's limit. The caller runs them one after another, each started in
    -- the statement that records the one before (the predecessor rule and the key lease are
    -- checked then, as for any start), so a deferred backlog drains a chain per key per batch
    -- instead of one row per key (docs/protocol/poll-cycle.md#the-exception-phase).
    SELECT w.message_id, w.message_key
      FROM {{schema}}.exception_queue_{{N}} w
     WHERE w.consumer_group_id = p_group
       AND w.message_key IN (SELECT c.message_key FROM cand c JOIN pick p ON p.message_id = c.message_id
                              WHERE {{schema}}.keyed_{{N}}(c.message_key, c.concurrency))
       AND {{schema}}.keyed_{{N}}(w.message_key, w.concurrency)
       AND w.message_id NOT IN (SELECT p.message_id FROM pick p)
       AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
       AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = w.message_id)
     ORDER BY w.message_id
     LIMIT GREATEST(p_limit - (SELECT count(*) FROM pick), 0)
     FOR UPDATE OF w SKIP LOCKED
  ), chain AS (
    SELECT COALESCE(max(x.n), 0) + 1 AS n FROM (SELECT count(*) AS n FROM follow f GROUP BY f.message_key) x
  ), len AS (
    -- A chain runs serially: the lease covers the longest one as well as the batch.
    SELECT {{schema}}.lease_ms_{{N}}(max({{schema}}.message_timeout_{{N}}(m.options, p_tdef, p_tmin, p_tmax)),
                                     GREATEST(count(*), (SELECT ch.n FROM chain ch) * p_conc), p_conc, p_margin, p_cap) AS ms
      FROM (SELECT p.message_id FROM pick p UNION ALL SELECT f.message_id FROM follow f) a
      JOIN {{schema}}.message_log_{{N}} m ON m.id = a.message_id
  ), upd AS (
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET lease_token = p_token, lease_expires_at = now() + (SELECT l.ms FROM len l) * interval '1 millisecond'
      FROM (SELECT p.message_id FROM pick p UNION ALL SELECT f.message_id FROM follow f) a
     WHERE e.consumer_group_id = p_group AND e.message_id = a.message_id
    RETURNING e.message_id
  )
  SELECT array_agg(u.message_id ORDER BY u.message_id) INTO v_ids FROM upd u;
  END IF;
  IF v_ids IS NULL THEN RETURN; END IF;
  WITH res AS (
    SELECT e.message_id AS id, e.message_key AS k, e.concurrency AS c,
           {{schema}}.message_timeout_{{N}}(m.options, p_tdef, p_tmin, p_tmax) AS tmo,
           -- A chain's later rows (kn > 1) start after the row before them is recorded.
           row_number() OVER (PARTITION BY CASE WHEN {{schema}}.keyed_{{N}}(e.message_key, e.concurrency) THEN e.message_key END
                              ORDER BY e.message_id) AS kn
      FROM unnest(v_ids) AS i(id)
      JOIN {{schema}}.exception_queue_{{N}} e ON e.consumer_group_id = p_group AND e.message_id = i.id
      JOIN {{schema}}.message_log_{{N}} m ON m.id = i.id
  ), ord AS (
    SELECT r.id, r.k, r.c, r.tmo, row_number() OVER (ORDER BY r.id) AS rn
      FROM res r
     WHERE NOT {{schema}}.keyed_{{N}}(r.k, r.c) OR (NOT (r.k = ANY (p_skip_keys)) AND r.kn = 1)
  ), cut AS (
    SELECT COALESCE(min(o.rn), 9223372036854775807) AS rn FROM ord o WHERE o.tmo + p_margin > p_budget
  )
  -- The key lease token is derived from the reservation token and the row, so a repeat of this
  -- call after a lost reply names the lease its first call took.
  SELECT COALESCE(jsonb_agg(jsonb_build_object(
           'id', o.id,
           'key_token', CASE WHEN {{schema}}.keyed_{{N}}(o.k, o.c) THEN md5(p_token::text || ':' || o.id)::uuid END,
           'run_ms', {{schema}}.lease_ms_{{N}}(o.tmo, 1, 1, p_margin, p_cap)) ORDER BY o.id), '[]'::jsonb)
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
