-- SQLStreams per-stream table family, version 2: a fence that only this stream's producers can hold
-- (docs/poll-cycle.md#the-fence). Placeholders as in 0001_family.sql.
--
-- Every insert into message_log_N holds RowExclusiveLock on the log (the parent, and the partition
-- it lands in) from parse time, before its id is drawn, until its transaction ends; the lock is
-- released only after the transaction stopped being "in progress" for new snapshots. So when no
-- other backend holds that lock, every id at or below a head read earlier has either committed
-- (and the next statement's snapshot sees it) or rolled back: the head is proven for this stream,
-- whatever unrelated transaction holds the cluster's xmin back.

-- The backends (other than the caller) whose open transaction holds RowExclusiveLock on this
-- stream's log or one of its partitions, oldest transaction first. pid is NULL for a prepared
-- transaction. The statement text is cut to 200 characters.
CREATE OR REPLACE FUNCTION {{schema}}.fence_holders_{{N}}()
RETURNS TABLE (pid INTEGER, xact_age_ms FLOAT8, application_name TEXT, query TEXT)
LANGUAGE sql VOLATILE AS $fn$
  SELECT l.pid, date_part('epoch', clock_timestamp() - a.xact_start) * 1000,
         a.application_name, left(a.query, 200)
    FROM pg_catalog.pg_locks l
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' AND l.granted
     AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
     AND l.relation IN (SELECT t.relid FROM pg_catalog.pg_partition_tree('{{schema}}.message_log_{{N}}'::regclass) t)
     AND l.pid IS DISTINCT FROM pg_backend_pid()
   ORDER BY a.xact_start NULLS FIRST
$fn$;

-- Fresh range claim behind the per-stream fence (docs/poll-cycle.md#the-fence, #the-range-lease).
-- Returns no row when nothing was claimed (low = high) and nothing holds the fence; when this
-- stream's producers hold it, one row per holder (r_low, r_high and id NULL, payload
-- {pid, age_ms, app, query}, options {"fence": true}). Otherwise a header row (r_low, r_high,
-- id NULL) and then the range's deliverable messages (r_low, r_high NULL; the caller orders them
-- by id; created_ms is created_at in epoch milliseconds, cheaper to parse than a timestamp).
-- The range streams out in one pass; the lease, Tmax × ceil(n / c) + margin, is written after
-- it with n = the rows returned, and only when there is a message. Tmax is the group default unless a message may ask for more
-- (p_timeout_max > p_timeout_default): then it is read from the messages' options.
CREATE OR REPLACE FUNCTION {{schema}}.claim_{{N}}(
  p_group BIGINT, p_batch BIGINT, p_head BIGINT, p_obs XID8, p_token UUID,
  p_timeout_default BIGINT, p_timeout_min BIGINT, p_timeout_max BIGINT,
  p_concurrency INTEGER, p_margin BIGINT, p_cap_ms BIGINT)
RETURNS TABLE (r_low BIGINT, r_high BIGINT, id BIGINT, message_key TEXT,
               compaction_rank BIGINT, payload JSONB, options JSONB, created_ms FLOAT8)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
  c RECORD;
  v_xmin XID8;
  v_gate BIGINT;
  v_low BIGINT;
  v_high BIGINT;
  v_n BIGINT;
  v_tmax BIGINT;
  v_obs_ok BOOLEAN;
  v_pending_ok BOOLEAN;
  v_blocked BOOLEAN := false;
BEGIN
  SELECT cur.claimed, cur.settled_head, cur.pending_head, cur.pending_xid INTO c
    FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  -- Proof, the cheap test: every transaction of the cluster older than an observation has ended.
  v_xmin := pg_snapshot_xmin(pg_current_snapshot());
  v_gate := c.settled_head;
  v_obs_ok := p_obs IS NULL OR p_obs = '0'::xid8 OR v_xmin >= p_obs;
  v_pending_ok := c.pending_xid IS NULL OR c.pending_head <= c.settled_head OR v_xmin >= c.pending_xid;
  -- The precise test when the cheap one fails: both heads were read before now, so a transaction
  -- that can still commit an id at or below them holds RowExclusiveLock on this stream's log now.
  -- No holder: both are proven, whatever else in the cluster is open.
  IF NOT (v_obs_ok AND v_pending_ok) THEN
    IF EXISTS (SELECT 1 FROM {{schema}}.fence_holders_{{N}}()) THEN
      v_blocked := true;
    ELSE
      v_obs_ok := true;
      v_pending_ok := true;
    END IF;
  END IF;
  IF p_obs IS NOT NULL AND p_obs <> '0'::xid8 AND v_obs_ok THEN
    v_gate := GREATEST(v_gate, p_head);
  END IF;
  IF c.pending_xid IS NOT NULL AND v_pending_ok THEN
    v_gate := GREATEST(v_gate, c.pending_head);
  END IF;
  v_low := c.claimed;
  v_high := GREATEST(v_low, LEAST(c.claimed + p_batch, v_gate));
  UPDATE {{schema}}.consumer_group_cursor_{{N}}
     SET claimed = v_high, settled_head = v_gate,
         pending_head = GREATEST(pending_head, p_head),
         pending_xid = GREATEST(pending_xid, NULLIF(p_obs, '0'::xid8)),
         updated_at = now()
   WHERE consumer_group_id = p_group;
  IF v_high = v_low THEN
    -- Held back by this stream's producers: say who (the caller warns about old ones).
    IF v_blocked THEN
      RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint,
                          jsonb_build_object('pid', f.pid, 'age_ms', f.xact_age_ms, 'app', f.application_name,
                                             'query', f.query),
                          '{"fence": true}'::jsonb, NULL::float8
                     FROM {{schema}}.fence_holders_{{N}}() f LIMIT 5;
    END IF;
    RETURN;
  END IF;

  RETURN QUERY SELECT v_low, v_high, NULL::bigint, NULL::text, NULL::bigint, NULL::jsonb,
                      NULL::jsonb, NULL::float8;
  -- This statement's fresh snapshot sees every id <= the gate that will ever commit.
  RETURN QUERY
  SELECT NULL::bigint, NULL::bigint, m.id, m.message_key, m.compaction_rank, m.payload, m.options,
         date_part('epoch', m.created_at) * 1000
    FROM {{schema}}.message_log_{{N}} m
   WHERE m.id > v_low AND m.id <= v_high
     AND (m.compaction_rank IS NULL OR EXISTS (
           SELECT 1 FROM {{schema}}.compaction_head_{{N}} h
            WHERE h.compaction_key = m.message_key AND h.message_id = m.id));
  GET DIAGNOSTICS v_n = ROW_COUNT;
  -- Nothing to deliver (gaps, filtered non-heads): no lease; the cursor advance passes the ids.
  IF v_n = 0 THEN RETURN; END IF;
  v_tmax := p_timeout_default;
  IF p_timeout_max > p_timeout_default THEN
    SELECT GREATEST(
             max(LEAST(GREATEST((m.options->>'timeout')::bigint, p_timeout_min), p_timeout_max)),
             CASE WHEN count(*) < v_n THEN p_timeout_default END)
      INTO v_tmax
      FROM {{schema}}.message_log_{{N}} m
     WHERE m.id > v_low AND m.id <= v_high AND m.options ? 'timeout';
    v_tmax := COALESCE(v_tmax, p_timeout_default);
  END IF;
  INSERT INTO {{schema}}.claim_lease_{{N}} (consumer_group_id, token, low, high, expires_at)
  VALUES (p_group, p_token, v_low, v_high,
          now() + GREATEST(1, LEAST(v_tmax * ceil(v_n::numeric / p_concurrency)::bigint + p_margin,
                                    COALESCE(p_cap_ms, 9223372036854775807))) * interval '1 millisecond');
END
$fn$;

