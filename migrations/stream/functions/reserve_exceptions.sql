-- Reserve due rows and start the first of them, in one round trip (docs/protocol/poll-cycle.md#the-exception-phase
-- steps 2 and 3). The reservation is the one the phase always made: up to p_limit rows in id
-- order, FOR UPDATE SKIP LOCKED, `ready` and due or `deferred`, not reserved by a live poll, whose
-- message exists, whose key is not leased (only the lowest waiting row per key, decided before
-- the limit), that pass the predecessor rule (ordered_pred_N); then, within the limit, the later
-- waiting rows of each exclusive/ordered key picked (its chain); reserved for lease_ms_N
-- (Tmax × max(ceil(n / p_conc), longest chain) + p_margin, capped at p_cap) under p_token,
-- nothing else changed.
-- Then the first p_start reserved rows in id order that are first of their chain (rows of a key in
-- p_skip_keys left out: an abandoned run of the key still runs in the caller's process) are
-- started by start_exceptions_N, each with a run lease of its timeout + p_margin (capped at p_cap)
-- and, when keyed, a key lease token of its own; a clean chain head (attempts = delays, not
-- compacted) starts with the clean rows after it as one group (element "lead": the head), whose
-- rows and key lease all last the group's timeouts added up + p_margin. When p_budget is not NULL
-- (ms left before the caller's deadline), starting stops at the first row whose timeout + p_margin
-- does not fit, as the caller's own deadline check does, and a group ends before the row that
-- would not fit.
-- Returns every reserved row with its message; kind/reason/ref as start_exceptions_N for the rows
-- it started (kind NULL: left reserved for the caller to start or release), and key_token/run_ms.
-- p_tdef/p_tmin/p_tmax resolve a message's timeout as resolveMessage() does (timeoutBounds()).
-- With p_rate (a group's resolved rateLimit), a fresh reservation takes no more rows than the group's
-- bucket has tokens, and takes one token per row reserved (take_tokens, docs/protocol/poll-cycle.md#rate-limit);
-- the rows held back stay due. A reservation the tokens cut (it filled every token and fewer than
-- p_limit) answers first a row with message_id NULL, kind 'rate_limited' and ref = ms until the next
-- token. The bucket is the first row this function locks.
CREATE OR REPLACE FUNCTION {{schema}}.reserve_exceptions_{{N}}(
  p_group BIGINT, p_limit INTEGER, p_tdef BIGINT, p_tmin BIGINT, p_tmax BIGINT, p_conc INTEGER,
  p_margin BIGINT, p_cap BIGINT, p_token UUID, p_start INTEGER, p_budget BIGINT, p_skip_keys TEXT[],
  p_repeat BOOLEAN, p_rate JSONB DEFAULT NULL)
RETURNS TABLE (message_id BIGINT, message_key TEXT, concurrency TEXT, attempts INTEGER, delays INTEGER,
               payload JSON, options JSONB, compaction_rank BIGINT, created_at TIMESTAMPTZ,
               kind TEXT, reason TEXT, ref BIGINT, key_token UUID, run_ms BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_ids BIGINT[];
  v_cands BIGINT[];
  v_deep BOOLEAN;
  v_last BIGINT;
  v_seen TEXT[];
  v_committed BIGINT;
  v_floor BIGINT;
  v_from BIGINT;
  v_starts JSONB;
  v_started JSONB := '[]'::jsonb;
  v_limit INTEGER := p_limit;
  v_wait BIGINT := 0;
BEGIN
  -- A repeat after a lost reply (p_repeat) finds its own reservation, the rows under p_token, and
  -- reserves nothing more; its starts are repeated too, which start_exceptions_N answers for a row already inflight: started.
  IF p_repeat THEN
    SELECT array_agg(e.message_id ORDER BY e.message_id) INTO v_ids
      FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group AND e.lease_token = p_token;
  END IF;
  IF v_ids IS NULL THEN
  IF p_rate IS NOT NULL THEN
    SELECT LEAST(t.available, p_limit) INTO v_limit FROM {{schema}}.take_tokens(p_group, 0, p_rate) t;
  END IF;
  -- Waiting rows lie above committed, or at or above the redrive floor (consumer_group_cursor_N.redrive_floor):
  -- reading from there passes no resolved row that was not vacuumed yet. The floor is cleared once
  -- no unresolved row is left at or below committed.
  SELECT c.committed, c.redrive_floor INTO v_committed, v_floor
    FROM {{schema}}.consumer_group_cursor_{{N}} c WHERE c.consumer_group_id = p_group;
  IF v_floor IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM {{schema}}.exception_queue_{{N}} e
        WHERE e.consumer_group_id = p_group AND e.message_id >= v_floor AND e.message_id <= v_committed
          AND e.status IN ('ready', 'inflight', 'deferred')) THEN
    UPDATE {{schema}}.consumer_group_cursor_{{N}} c SET redrive_floor = NULL
     WHERE c.consumer_group_id = p_group AND c.redrive_floor = v_floor;
    v_floor := NULL;
  END IF;
  v_from := LEAST(COALESCE(v_committed, 0), COALESCE(v_floor - 1, v_committed, 0));
  -- The candidates, in id order until p_limit pass the rules: the lowest waiting row of each
  -- exclusive/ordered key (leased or not: a key whose lowest row is reserved waits) and the waiting
  -- unkeyed or parallel rows; passing: not reserved by a live poll, the message exists, the key is
  -- not leased, the predecessor rule holds. First among the group's first 4 × p_limit waiting rows
  -- in id order after v_from (each key's first row there is its lowest); when they are all taken and too few
  -- passed, the rows after them: each key not seen there by a skip scan of the key index (a probe
  -- per key, not per row) and the unkeyed rows. Either way the answer is the first p_limit passing
  -- candidates in id order, read without a probe per waiting row.
  WITH pre AS MATERIALIZED (
    SELECT e.message_id, e.message_key, e.concurrency, e.lease_expires_at,
           (e.concurrency <> 'parallel' AND e.message_key IS NOT NULL) AS keyed
      FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group AND e.message_id > v_from
       AND {{schema}}.row_waiting_{{N}}(e.status, e.can_run_after)
     ORDER BY e.message_id
     LIMIT p_limit * 4
  ), heads AS MATERIALIZED (
    SELECT DISTINCT ON (p.keyed, CASE WHEN p.keyed THEN p.message_key END, CASE WHEN NOT p.keyed THEN p.message_id END) p.*
      FROM pre p
     ORDER BY p.keyed, CASE WHEN p.keyed THEN p.message_key END, CASE WHEN NOT p.keyed THEN p.message_id END, p.message_id
  ), ok AS (
    SELECT h.message_id FROM (SELECT * FROM heads ORDER BY message_id OFFSET 0) h
     WHERE (h.lease_expires_at IS NULL OR {{schema}}.lease_expired_{{N}}(h.lease_expires_at))
       -- A scalar subquery, a probe per candidate: EXISTS could become a join that reads the log.
       AND (SELECT true FROM {{schema}}.message_log_{{N}} m WHERE m.id = h.message_id)
       AND (NOT h.keyed OR (
             NOT EXISTS (SELECT 1 FROM {{schema}}.message_key_lease_{{N}} k
                          WHERE k.consumer_group_id = p_group AND k.message_key = h.message_key
                            AND NOT {{schema}}.lease_expired_{{N}}(k.expires_at))
             -- The predecessor rule, per key (docs/protocol/ordering.md#the-predecessor-rule).
             AND (h.concurrency <> 'ordered'
                  OR {{schema}}.ordered_pred_{{N}}(p_group, h.message_key, h.message_id, 0, 0) IS NULL)))
     LIMIT v_limit
  )
  SELECT ARRAY(SELECT o.message_id FROM ok o ORDER BY o.message_id),
         (SELECT count(*) = p_limit * 4 FROM pre), (SELECT max(p.message_id) FROM pre p),
         ARRAY(SELECT DISTINCT p.message_key FROM pre p WHERE p.keyed)
    INTO v_cands, v_deep, v_last, v_seen;
  IF v_deep AND cardinality(v_cands) < v_limit THEN
    v_cands := v_cands || ARRAY(
      WITH RECURSIVE ks AS (
        SELECT (SELECT min(e.message_key) FROM {{schema}}.exception_queue_{{N}} e
                 WHERE e.consumer_group_id = p_group AND e.message_key IS NOT NULL) AS k
        UNION ALL
        SELECT (SELECT min(e.message_key) FROM {{schema}}.exception_queue_{{N}} e
                 WHERE e.consumer_group_id = p_group AND e.message_key > ks.k)
          FROM ks WHERE ks.k IS NOT NULL
      )
      SELECT h.message_id FROM (
        SELECT x.* FROM (
          SELECT f.message_id, f.message_key, f.concurrency, f.lease_expires_at, true AS keyed
            FROM ks
            CROSS JOIN LATERAL (
              SELECT e.message_id, e.message_key, e.concurrency, e.lease_expires_at
                FROM {{schema}}.exception_queue_{{N}} e
               WHERE e.consumer_group_id = p_group AND e.message_key = ks.k AND e.concurrency <> 'parallel'
                 AND {{schema}}.row_waiting_{{N}}(e.status, e.can_run_after)
               ORDER BY e.message_id
               LIMIT 1) f
           WHERE ks.k IS NOT NULL AND NOT (ks.k = ANY (v_seen))
          UNION ALL
          -- Unkeyed and parallel rows are never deferred (nothing to wait for): the due ready rows.
          SELECT u.* FROM (
            SELECT e.message_id, e.message_key, e.concurrency, e.lease_expires_at, false AS keyed
              FROM {{schema}}.exception_queue_{{N}} e
             WHERE e.consumer_group_id = p_group AND e.message_id > v_last
               AND (e.message_key IS NULL OR e.concurrency = 'parallel')
               AND e.status = 'ready' AND e.can_run_after <= now()
             ORDER BY e.message_id
             LIMIT p_limit) u) x
         ORDER BY x.message_id
        OFFSET 0) h
     WHERE (h.lease_expires_at IS NULL OR {{schema}}.lease_expired_{{N}}(h.lease_expires_at))
       -- A scalar subquery, a probe per candidate: EXISTS could become a join that reads the log.
       AND (SELECT true FROM {{schema}}.message_log_{{N}} m WHERE m.id = h.message_id)
       AND (NOT h.keyed OR (
             NOT EXISTS (SELECT 1 FROM {{schema}}.message_key_lease_{{N}} k
                          WHERE k.consumer_group_id = p_group AND k.message_key = h.message_key
                            AND NOT {{schema}}.lease_expired_{{N}}(k.expires_at))
             -- The predecessor rule, per key (docs/protocol/ordering.md#the-predecessor-rule).
             AND (h.concurrency <> 'ordered'
                  OR {{schema}}.ordered_pred_{{N}}(p_group, h.message_key, h.message_id, 0, 0) IS NULL)))
     LIMIT v_limit - cardinality(v_cands));
  END IF;
  WITH cand AS (
    SELECT e.message_id, e.message_key, e.concurrency
      FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group AND e.message_id = ANY (v_cands)
       AND {{schema}}.row_due_{{N}}(e.status, e.can_run_after, e.lease_expires_at)
     ORDER BY e.message_id
     FOR UPDATE OF e SKIP LOCKED
  ), ahead AS MATERIALIZED (
    -- A key's chain: the waiting rows of each picked exclusive/ordered key after its first, in id
    -- order, up to the batch's limit, read per key from the key index. The caller runs them one
    -- after another, started in groups (start_exceptions_N: a group's later rows are checked
    -- against the predecessor rule and run under the group's key lease), so a deferred backlog
    -- drains a chain per key per batch (docs/protocol/poll-cycle.md#the-exception-phase).
    SELECT w.message_id
      FROM cand c
      CROSS JOIN LATERAL (
        SELECT w.message_id FROM {{schema}}.exception_queue_{{N}} w
         WHERE w.consumer_group_id = p_group AND w.message_key = c.message_key AND w.message_id > c.message_id
           AND w.concurrency <> 'parallel'
           AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
           AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = w.message_id)
         ORDER BY w.message_id
         LIMIT p_limit) w
     WHERE c.concurrency <> 'parallel' AND c.message_key IS NOT NULL
     ORDER BY w.message_id
     LIMIT GREATEST(v_limit - (SELECT count(*) FROM cand), 0)
  ), follow AS (
    SELECT w.message_id, w.message_key
      FROM {{schema}}.exception_queue_{{N}} w
     WHERE w.consumer_group_id = p_group AND w.message_id = ANY (ARRAY(SELECT a.message_id FROM ahead a))
       AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
     FOR UPDATE OF w SKIP LOCKED
  ), pick AS (
    SELECT c.message_id FROM cand c
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
  IF p_rate IS NOT NULL THEN
    SELECT t.wait_ms INTO v_wait
      FROM {{schema}}.take_tokens(p_group, COALESCE(cardinality(v_ids), 0)
             + CASE WHEN COALESCE(cardinality(v_ids), 0) = v_limit AND v_limit < p_limit THEN 1 ELSE 0 END, p_rate) t;
  END IF;
  END IF;
  IF v_wait > 0 THEN
    kind := 'rate_limited';
    ref := v_wait;
    RETURN NEXT;
    kind := NULL;
    ref := NULL;
  END IF;
  IF v_ids IS NULL THEN RETURN; END IF;
  WITH res AS (
    SELECT e.message_id AS id, e.message_key AS k, e.concurrency AS c,
           {{schema}}.message_timeout_{{N}}(m.options, p_tdef, p_tmin, p_tmax) AS tmo,
           -- Never charged a failure or an expiry, not compacted: may run in a group behind
           -- another row (docs/protocol/poll-cycle.md#the-exception-phase).
           -- A message with an expiry runs alone, so its start checks the expiry (start_exceptions_N).
           (e.attempts = e.delays AND m.compaction_rank IS NULL
            AND (e.expiry_waived OR {{schema}}.expires_in_{{N}}(m.options, m.created_at) IS NULL)) AS clean,
           row_number() OVER (PARTITION BY CASE WHEN e.concurrency <> 'parallel' THEN e.message_key END
                              ORDER BY e.message_id) AS kn
      FROM unnest(v_ids) AS i(id)
      JOIN {{schema}}.exception_queue_{{N}} e ON e.consumer_group_id = p_group AND e.message_id = i.id
      JOIN {{schema}}.message_log_{{N}} m ON m.id = i.id
  ), ord AS (
    SELECT r.id, r.k, r.c, r.tmo, r.clean, row_number() OVER (ORDER BY r.id) AS rn
      FROM res r
     WHERE NOT {{schema}}.keyed_{{N}}(r.k, r.c) OR (NOT (r.k = ANY (p_skip_keys)) AND r.kn = 1)
  ), cut AS (
    SELECT COALESCE(min(o.rn), 9223372036854775807) AS rn FROM ord o WHERE o.tmo + p_margin > p_budget
  ), sel AS (
    SELECT o.* FROM ord o, cut x WHERE o.rn <= p_start AND o.rn < x.rn
  ), grp AS (
    -- A started chain's first group: its first row and, when that row is clean, the clean rows
    -- after it, while their timeouts added up still fit the time left and the lease cap. They
    -- start together under one key lease as long as the group (start_exceptions_N).
    SELECT g.lead, g.id, g.cum FROM (
      SELECT h.id AS lead, r.id, r.kn,
             sum(r.tmo) OVER w AS cum, bool_and(r.clean) OVER w AS clean
        FROM sel h
        JOIN res r ON r.k = h.k AND r.c <> 'parallel'
       WHERE h.c <> 'parallel' AND h.k IS NOT NULL
      WINDOW w AS (PARTITION BY h.id ORDER BY r.id)) g
     WHERE g.kn = 1
        OR (g.clean AND g.cum + p_margin <= LEAST(COALESCE(p_budget, 9223372036854775807), COALESCE(p_cap, 9223372036854775807)))
  ), glen AS (
    SELECT g.lead, max(g.cum) AS total FROM grp g GROUP BY g.lead
  )
  -- The key lease token is derived from the reservation token and the row, so a repeat of this
  -- call after a lost reply names the lease its first call took.
  SELECT COALESCE(jsonb_agg(x.j ORDER BY x.id), '[]'::jsonb) INTO v_starts
    FROM (SELECT o.id, jsonb_build_object(
                 'id', o.id,
                 'key_token', CASE WHEN o.c <> 'parallel' AND o.k IS NOT NULL THEN md5(p_token::text || ':' || o.id)::uuid END,
                 'run_ms', LEAST(COALESCE(l.total, o.tmo) + p_margin, COALESCE(p_cap, 9223372036854775807))) AS j
            FROM sel o LEFT JOIN glen l ON l.lead = o.id
          UNION ALL
          SELECT g.id, jsonb_build_object(
                 'id', g.id, 'key_token', NULL, 'lead', g.lead,
                 'run_ms', LEAST(l.total + p_margin, COALESCE(p_cap, 9223372036854775807)))
            FROM grp g JOIN glen l ON l.lead = g.lead
           WHERE g.id <> g.lead) x;
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
      LEFT JOIN jsonb_to_recordset(v_starts) AS st(id BIGINT, key_token UUID, run_ms BIGINT, lead BIGINT) ON st.id = i.id
      LEFT JOIN jsonb_to_recordset(v_started) AS s(message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
        ON s.message_id = i.id
     ORDER BY i.id;
END
$fn$;
