-- Record the batch before (p_outcomes under p_record_token, when given), reserve due rows and start
-- the first of them, in one round trip (docs/protocol/poll-cycle.md#the-exception-phase steps 2 to 4).
-- A paused group reserves nothing. The candidates are the one the phase always took: in id order,
-- `ready` and due or `deferred`, not reserved by a live poll, whose message exists, whose key is not
-- leased (only the lowest waiting row per key, decided before the limit), that pass the
-- predecessor rule (ordered_pred_N), locked FOR UPDATE SKIP LOCKED. Each picked
-- exclusive/ordered key brings its chain, the key's later waiting rows in id order: every chain
-- first gets its share of the batch (p_limit over p_conc workers, or over the keyed heads when
-- there are fewer), then the chains that filled it read on until p_limit rows; whole chains are
-- taken in the order of their heads, share by share, so a key with many rows does not shut the
-- others out and a batch holds few long chains rather than many short ones. Reserved rows get
-- p_token and a lease of lease_ms_N (Tmax × max(ceil(n / p_conc), longest chain) + p_margin,
-- capped at p_cap), nothing else changed.
-- Then the first p_start reserved rows in id order that are first of their chain (rows of a key in
-- p_skip_keys left out: an abandoned run of the key still runs in the caller's process) start,
-- each with a run lease of its timeout + p_margin (capped at p_cap); a clean chain head
-- (attempts = delays, not compacted, no expiry) starts with the clean rows after it as one group
-- (element "lead": the head), whose rows and key lease all last the group's timeouts added up +
-- p_margin. Clean keyed heads and their groups start here, set-based: their key leases in one
-- take_keys_N call under one key token derived from p_token, each group's later rows below its
-- lowest unresolved predecessor outside it (group_pred_N), and the one UPDATE that reserves every
-- row makes them inflight. Every other start (unkeyed, charged before, and every start of a repeat)
-- goes through start_exceptions_N. When p_budget is not NULL (ms left before the caller's
-- deadline), starting stops at the first row whose timeout + p_margin does not fit, as the
-- caller's own deadline check does, and a group ends before the row that would not fit.
-- Returns first one row per outcome recorded (step 'record', message_id, kind), then every
-- reserved row with its message; kind/reason/ref as start_exceptions_N for the rows it started
-- (kind NULL: left reserved for the caller to start or release), and key_token/run_ms.
-- p_tdef/p_tmin/p_tmax resolve a message's timeout as resolveMessage() does (timeoutBounds()).
-- With p_rate (a group's resolved rateLimit), a fresh reservation takes no more rows than the group's
-- bucket has tokens, and takes one token per row reserved (take_tokens, docs/protocol/poll-cycle.md#rate-limit);
-- the rows held back stay due. A reservation the tokens cut (it filled every token and fewer than
-- p_limit) answers a row with message_id NULL, kind 'rate_limited' and ref = ms until the next
-- token. The bucket is the first row this function locks after the record.
-- It plans its statements once per session (plan_cache_mode): the custom plans of a session's
-- first calls cost more than the call.
CREATE OR REPLACE FUNCTION {{schema}}.reserve_exceptions_{{N}}(
  p_group BIGINT, p_limit INTEGER, p_tdef BIGINT, p_tmin BIGINT, p_tmax BIGINT, p_conc INTEGER,
  p_margin BIGINT, p_cap BIGINT, p_token UUID, p_start INTEGER, p_budget BIGINT, p_skip_keys TEXT[],
  p_repeat BOOLEAN, p_rate JSONB DEFAULT NULL, p_record_token UUID DEFAULT NULL, p_outcomes JSONB DEFAULT NULL)
RETURNS TABLE (message_id BIGINT, message_key TEXT, concurrency TEXT, attempts INTEGER, delays INTEGER,
               payload JSON, options JSONB, compaction_rank BIGINT, created_at TIMESTAMPTZ,
               kind TEXT, reason TEXT, ref BIGINT, key_token UUID, run_ms BIGINT, step TEXT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
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
  v_ktoken UUID := md5(p_token::text || ':keys')::uuid;
  v_refused JSONB;
  v_fast JSONB := '[]'::jsonb;
  v_ms BIGINT;
  v_fresh BOOLEAN := false;
  v_rec RECORD;
  v_fill BIGINT;
  v_limit INTEGER := p_limit;
  v_wait BIGINT := 0;
BEGIN
  -- The outcomes of the batch before, under its token p_record_token, recorded first as
  -- record_exceptions_N does (one row each, step 'record', kind as record_exceptions_N's), so the
  -- reservation sees their rows resolved and their key leases released.
  IF p_outcomes IS NOT NULL AND jsonb_array_length(p_outcomes) > 0 THEN
    FOR v_rec IN SELECT r.message_id, r.kind FROM {{schema}}.record_exceptions_{{N}}(p_group, p_record_token, p_outcomes) r LOOP
      message_id := v_rec.message_id;
      kind := v_rec.kind;
      step := 'record';
      RETURN NEXT;
    END LOOP;
    message_id := NULL;
    kind := NULL;
    step := NULL;
  END IF;
  -- A repeat after a lost reply (p_repeat) finds its own reservation, the rows under p_token, and
  -- reserves nothing more; its starts are repeated too, which start_exceptions_N answers for a row already inflight: started.
  IF p_repeat THEN
    SELECT array_agg(e.message_id ORDER BY e.message_id) INTO v_ids
      FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group AND e.lease_token = p_token;
  END IF;
  IF v_ids IS NULL THEN
  -- A paused group reserves nothing: a drain's poll may reserve batch after batch without a load between them.
  IF EXISTS (SELECT 1 FROM {{schema}}.consumer_group_config g WHERE g.id = p_group AND g.paused) THEN
    RETURN;
  END IF;
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
  -- passed, and either the rows they bring among them (a key's chain) do not fill the batch or
  -- they are fewer than p_conc, the rows after them: each key not seen there by a skip scan of the
  -- key index (a probe per key, not per row) and the unkeyed rows. Either way the answer is the first passing candidates in
  -- id order, up to p_limit, read without a probe per waiting row.
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
    SELECT h.message_id, h.message_key, h.keyed FROM (SELECT * FROM heads ORDER BY message_id OFFSET 0) h
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
         ARRAY(SELECT DISTINCT p.message_key FROM pre p WHERE p.keyed),
         -- The rows the passing candidates bring among those read: themselves and, for a key,
         -- its later rows there (its chain, at least).
         (SELECT count(*) FROM pre p
           WHERE p.message_id IN (SELECT o.message_id FROM ok o)
              OR (p.keyed AND p.message_key IN (SELECT o.message_key FROM ok o WHERE o.keyed)))
    INTO v_cands, v_deep, v_last, v_seen, v_fill;
  -- Too few candidates passed to fill the batch with their chains, or to keep every worker busy
  -- (a chain runs on one worker): look past the rows read.
  IF v_deep AND cardinality(v_cands) < v_limit AND (v_fill < v_limit OR cardinality(v_cands) < p_conc) THEN
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
  ), heads AS MATERIALIZED (
    SELECT c.*, row_number() OVER (ORDER BY c.message_id) AS hn, {{schema}}.keyed_{{N}}(c.message_key, c.concurrency) AS keyed
      FROM cand c
  ), cap AS (
    -- A chain's share of the batch: the batch over the workers, or over the keyed heads when
    -- there are fewer heads than workers (a key's whole chain, up to the limit, when it is the only one).
    SELECT GREATEST(ceil(v_limit::numeric / GREATEST(p_conc, 1)),
                    ceil(v_limit::numeric / GREATEST(count(*) FILTER (WHERE h.keyed), 1)))::integer AS n
      FROM heads h
  ), ahead AS MATERIALIZED (
    -- A key's chain: the waiting rows of each picked exclusive/ordered key after its first, in id
    -- order, read per key from the key index, first up to its share. The caller runs them one
    -- after another, started in groups (start_exceptions_N: a group's later rows are checked
    -- against the predecessor rule and run under the group's key lease), so a deferred backlog
    -- drains a chain per key per batch (docs/protocol/poll-cycle.md#the-exception-phase).
    SELECT h.hn, w.message_id, w.kn
      FROM heads h
      CROSS JOIN LATERAL (
        SELECT w.message_id, row_number() OVER (ORDER BY w.message_id) AS kn
          FROM (SELECT w.message_id FROM {{schema}}.exception_queue_{{N}} w
                 WHERE w.consumer_group_id = p_group AND w.message_key = h.message_key AND w.message_id > h.message_id
                   AND w.concurrency <> 'parallel'
                   AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
                   AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = w.message_id)
                 ORDER BY w.message_id
                 LIMIT (SELECT GREATEST(x.n - 1, 0) FROM cap x)) w) w
     WHERE h.keyed
  ), more AS MATERIALIZED (
    -- When the shares leave the batch short (some chains are shorter), the chains that filled
    -- their share read on, up to the batch's limit.
    SELECT a.hn, w.message_id, w.kn
      FROM (SELECT a.hn, max(a.message_id) AS last, count(*) AS n FROM ahead a GROUP BY a.hn) a
      JOIN heads h ON h.hn = a.hn
      CROSS JOIN LATERAL (
        SELECT w.message_id, a.n + row_number() OVER (ORDER BY w.message_id) AS kn
          FROM (SELECT w.message_id FROM {{schema}}.exception_queue_{{N}} w
                 WHERE w.consumer_group_id = p_group AND w.message_key = h.message_key AND w.message_id > a.last
                   AND w.concurrency <> 'parallel'
                   AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
                   AND EXISTS (SELECT 1 FROM {{schema}}.message_log_{{N}} m WHERE m.id = w.message_id)
                 ORDER BY w.message_id
                 LIMIT GREATEST(v_limit - a.n - 1, 0)) w) w
     WHERE a.n = (SELECT x.n - 1 FROM cap x)
       AND (SELECT count(*) FROM heads) + (SELECT count(*) FROM ahead) < v_limit
  ), taken AS MATERIALIZED (
    -- Whole chains, in turns of a share each in the order of their heads, until the batch's
    -- limit: every head with its share, then the next share of the chains that go on, and so on.
    SELECT t.message_id, t.kn FROM (
      SELECT h.hn, h.message_id, 0::bigint AS kn FROM heads h
      UNION ALL
      SELECT a.hn, a.message_id, a.kn FROM ahead a
      UNION ALL
      SELECT a.hn, a.message_id, a.kn FROM more a) t
     ORDER BY t.kn / (SELECT x.n FROM cap x), t.hn, t.kn
     LIMIT v_limit
  ), follow AS (
    SELECT w.message_id, w.message_key
      FROM {{schema}}.exception_queue_{{N}} w
     WHERE w.consumer_group_id = p_group AND w.message_id = ANY (ARRAY(SELECT t.message_id FROM taken t WHERE t.kn > 0))
       AND {{schema}}.row_due_{{N}}(w.status, w.can_run_after, w.lease_expires_at)
     FOR UPDATE OF w SKIP LOCKED
  ), pick AS (
    SELECT t.message_id FROM taken t WHERE t.kn = 0
  ), chain AS (
    SELECT COALESCE(max(x.n), 0) + 1 AS n FROM (SELECT count(*) AS n FROM follow f GROUP BY f.message_key) x
  ), len AS (
    -- A chain runs serially: the lease covers the longest one as well as the batch.
    SELECT {{schema}}.lease_ms_{{N}}(max({{schema}}.message_timeout_{{N}}(m.options, p_tdef, p_tmin, p_tmax)),
                                     GREATEST(count(*), (SELECT ch.n FROM chain ch) * p_conc), p_conc, p_margin, p_cap) AS ms
      FROM (SELECT p.message_id FROM pick p UNION ALL SELECT f.message_id FROM follow f) a
      -- A probe per row (OFFSET 0 keeps it one): a join let the planner read the whole log.
      CROSS JOIN LATERAL (SELECT m.options FROM {{schema}}.message_log_{{N}} m WHERE m.id = a.message_id OFFSET 0) m
  )
  -- Locked here; written once below, with the starts (the reservation's token and lease, or a
  -- start's inflight run lease).
  SELECT array_agg(a.message_id ORDER BY a.message_id), (SELECT l.ms FROM len l)
    INTO v_ids, v_ms
    FROM (SELECT p.message_id FROM pick p UNION ALL SELECT f.message_id FROM follow f) a;
  v_fresh := v_ids IS NOT NULL;
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
  -- call after a lost reply names the lease its first call took. A clean keyed chain head and its
  -- group ("fast") start below in one statement per step for all of them, under one key lease token
  -- of the reservation's; a repeat starts them as start_exceptions_N does.
  SELECT COALESCE(jsonb_agg(x.j ORDER BY x.id), '[]'::jsonb) INTO v_starts
    FROM (SELECT o.id, jsonb_build_object(
                 'id', o.id, 'k', o.k, 'ordered', o.c = 'ordered',
                 'fast', f.fast,
                 'key_token', CASE WHEN o.clean AND o.c <> 'parallel' AND o.k IS NOT NULL THEN v_ktoken
                                   WHEN o.c <> 'parallel' AND o.k IS NOT NULL THEN md5(p_token::text || ':' || o.id)::uuid END,
                 'run_ms', LEAST(COALESCE(l.total, o.tmo) + p_margin, COALESCE(p_cap, 9223372036854775807))) AS j
            FROM sel o LEFT JOIN glen l ON l.lead = o.id
            CROSS JOIN LATERAL (SELECT v_fresh AND o.clean AND o.c <> 'parallel' AND o.k IS NOT NULL AS fast) f
          UNION ALL
          SELECT g.id, jsonb_build_object(
                 'id', g.id, 'key_token', NULL, 'lead', g.lead, 'fast', v_fresh,
                 'run_ms', LEAST(l.total + p_margin, COALESCE(p_cap, 9223372036854775807)))
            FROM grp g JOIN glen l ON l.lead = g.lead
           WHERE g.id <> g.lead) x;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_starts) j WHERE (j->>'fast')::boolean) THEN
    -- The fast groups' key leases, in one call (take_keys_N: the predecessor rule per key, leases
    -- inserted in key order), each as long as its group; a key refused defers its head and the
    -- group's later rows. Then a later row starts when it lies below the group's lowest unresolved
    -- predecessor outside it (group_pred_N, ordered keys), as start_followers_N decides. The rows
    -- are locked above and clean: no expiry, not compacted, their message exists.
    SELECT COALESCE(jsonb_object_agg(t.k, jsonb_build_array(t.kind, t.pred_id)), '{}'::jsonb) INTO v_refused
      FROM {{schema}}.take_keys_{{N}}(p_group, v_ktoken, 0, 0,
             (SELECT jsonb_agg(jsonb_build_object('k', j->>'k', 'id', (j->>'id')::bigint, 'ordered', (j->>'ordered')::boolean,
                                                  'ms', (j->>'run_ms')::bigint))
                FROM jsonb_array_elements(v_starts) j WHERE (j->>'fast')::boolean AND j->>'lead' IS NULL)) t;
    WITH f AS MATERIALIZED (
      SELECT j.id, COALESCE(j.lead, j.id) AS lead, j.run_ms, j.lead IS NULL AS head
        FROM jsonb_to_recordset(v_starts) AS j(id BIGINT, lead BIGINT, run_ms BIGINT, fast BOOLEAN)
       WHERE j.fast
    ), h AS MATERIALIZED (
      SELECT j.id AS lead, j.k, v_refused -> j.k AS refused,
             CASE WHEN j.ordered AND v_refused -> j.k IS NULL AND EXISTS (SELECT 1 FROM f WHERE f.lead = j.id AND NOT f.head)
                  THEN {{schema}}.group_pred_{{N}}(p_group, j.k, j.id,
                         (SELECT max(f.id) FROM f WHERE f.lead = j.id),
                         ARRAY(SELECT f.id FROM f WHERE f.lead = j.id AND NOT f.head)) END AS cut
        FROM jsonb_to_recordset(v_starts) AS j(id BIGINT, k TEXT, ordered BOOLEAN, lead BIGINT, fast BOOLEAN)
       WHERE j.fast AND j.lead IS NULL
    )
    SELECT COALESCE(jsonb_agg(jsonb_build_object('id', d.id, 'run_ms', d.run_ms, 'go', d.go,
                                                 'reason', CASE WHEN d.go THEN NULL ELSE d.reason END,
                                                 'ref', CASE WHEN d.go THEN NULL ELSE d.ref END)), '[]'::jsonb)
      INTO v_fast
      FROM (SELECT f.id, f.run_ms,
                   h.refused IS NULL AND (f.head OR h.cut IS NULL OR f.id < h.cut) AS go,
                   CASE WHEN f.head THEN h.refused ->> 0 ELSE 'pred' END AS reason,
                   CASE WHEN f.head THEN (h.refused ->> 1)::bigint
                        WHEN h.refused IS NULL AND h.cut < f.id THEN h.cut ELSE f.lead END AS ref
              FROM f JOIN h ON h.lead = f.lead) d;
  END IF;
  IF v_fresh THEN
    -- The one write of a fresh reservation: every row under p_token, a fast start inflight until
    -- its run lease ends, every other row reserved for v_ms.
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET lease_token = p_token,
           status = CASE WHEN x.go THEN 'inflight' ELSE e.status END,
           lease_expires_at = now() + (CASE WHEN x.go THEN x.run_ms ELSE v_ms END) * interval '1 millisecond',
           updated_at = CASE WHEN x.go THEN now() ELSE e.updated_at END
      FROM (SELECT i.id, COALESCE(d.go, false) AS go, d.run_ms
              FROM unnest(v_ids) AS i(id)
              LEFT JOIN jsonb_to_recordset(v_fast) AS d(id BIGINT, go BOOLEAN, run_ms BIGINT) ON d.id = i.id) x
     WHERE e.consumer_group_id = p_group AND e.message_id = x.id;
  END IF;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_starts) j WHERE NOT (j->>'fast')::boolean) THEN
    SELECT COALESCE(jsonb_agg(to_jsonb(s)), '[]'::jsonb) INTO v_started
      FROM {{schema}}.start_exceptions_{{N}}(p_group, p_token,
             (SELECT jsonb_agg(j) FROM jsonb_array_elements(v_starts) j WHERE NOT (j->>'fast')::boolean)) s;
  END IF;
  SELECT v_started || COALESCE(jsonb_agg(jsonb_build_object(
           'message_id', d.id, 'kind', CASE WHEN d.go THEN 'started' ELSE 'deferred' END, 'reason', d.reason, 'ref', d.ref)), '[]'::jsonb)
    INTO v_started
    FROM jsonb_to_recordset(v_fast) AS d(id BIGINT, go BOOLEAN, reason TEXT, ref BIGINT);
  RETURN QUERY
    SELECT e.message_id, e.message_key, e.concurrency, e.attempts, e.delays,
           m.payload, m.options, m.compaction_rank, m.created_at,
           s.kind, s.reason, s.ref, st.key_token, st.run_ms, NULL::text
      FROM unnest(v_ids) AS i(id)
      JOIN {{schema}}.exception_queue_{{N}} e ON e.consumer_group_id = p_group AND e.message_id = i.id
      JOIN {{schema}}.message_log_{{N}} m ON m.id = i.id
      LEFT JOIN jsonb_to_recordset(v_starts) AS st(id BIGINT, key_token UUID, run_ms BIGINT, lead BIGINT) ON st.id = i.id
      LEFT JOIN jsonb_to_recordset(v_started) AS s(message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
        ON s.message_id = i.id
     ORDER BY i.id;
END
$fn$;
