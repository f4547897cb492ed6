-- Ranges bounded by bytes (docs/poll-cycle.md#the-byte-bound): claim_N takes p_bytes and hands out
-- messages in id order only while the payload bytes handed out stay within it (the first message
-- always goes, whatever its size); the range, its lease and the cursor's claimed end at the last
-- message handed out. Payloads come back as text, converted once: its length is what is counted.
-- Rows: the range's messages (r_low, r_high NULL) and then a header row (r_low, r_high, id NULL);
-- when this stream's producers hold the fence and nothing was claimed, one row per holder
-- (r_low, r_high and id NULL, payload {pid, age_ms, app, query} as text, options {"fence": true}).
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.

DROP FUNCTION IF EXISTS {{schema}}.claim_{{N}}(BIGINT, BIGINT, BIGINT, XID8, UUID, BIGINT, BIGINT, BIGINT, INTEGER, BIGINT, BIGINT);

CREATE OR REPLACE FUNCTION {{schema}}.claim_{{N}}(
  p_group BIGINT, p_batch BIGINT, p_head BIGINT, p_obs XID8, p_token UUID,
  p_timeout_default BIGINT, p_timeout_min BIGINT, p_timeout_max BIGINT,
  p_concurrency INTEGER, p_margin BIGINT, p_cap_ms BIGINT, p_bytes BIGINT)
RETURNS TABLE (r_low BIGINT, r_high BIGINT, id BIGINT, message_key TEXT,
               compaction_rank BIGINT, payload TEXT, options JSONB, created_ms FLOAT8)
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
  v_bytes BIGINT := 0;
  v_len BIGINT;
  v_last BIGINT;
  rec RECORD;
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
  v_n := 0;
  IF v_high > v_low THEN
    -- This query's fresh snapshot (taken after the cursor lock) sees every id <= the gate that will
    -- ever commit. It stops at the byte bound, so payloads past it are never read.
    FOR rec IN
      SELECT l.id, l.message_key, l.compaction_rank, l.payload::text AS p, l.options,
             date_part('epoch', l.created_at) * 1000 AS ms
        FROM {{schema}}.message_log_{{N}} l
       WHERE l.id > v_low AND l.id <= v_high
         AND (l.compaction_rank IS NULL OR EXISTS (
               SELECT 1 FROM {{schema}}.compaction_head_{{N}} h
                WHERE h.compaction_key = l.message_key AND h.message_id = l.id))
       ORDER BY l.id
    LOOP
      v_len := octet_length(rec.p);
      IF v_n > 0 AND v_bytes + v_len > p_bytes THEN
        v_high := v_last; -- the range ends at the last message handed out
        EXIT;
      END IF;
      v_bytes := v_bytes + v_len;
      v_n := v_n + 1;
      v_last := rec.id;
      r_low := NULL; r_high := NULL; id := rec.id; message_key := rec.message_key;
      compaction_rank := rec.compaction_rank; payload := rec.p; options := rec.options; created_ms := rec.ms;
      RETURN NEXT;
    END LOOP;
  END IF;
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
                                             'query', f.query)::text,
                          '{"fence": true}'::jsonb, NULL::float8
                     FROM {{schema}}.fence_holders_{{N}}() f LIMIT 5;
    END IF;
    RETURN;
  END IF;
  r_low := v_low; r_high := v_high; id := NULL; message_key := NULL; compaction_rank := NULL;
  payload := NULL; options := NULL; created_ms := NULL;
  RETURN NEXT;
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

