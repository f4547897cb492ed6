-- A fresh range claim with the snapshot fence (docs/protocol/poll-cycle.md#the-fence), optionally after
-- recording the previous range in the same transaction (docs/protocol/poll-cycle.md#the-steady-state).
--
-- With p_rec_token set, record_range_N(p_group, p_rec_token, NULL, NULL, p_rec_eq, p_rec_dl,
-- p_rec_keys) first records the previous range whole; the observation is this transaction's id,
-- assigned by that record, so every transaction that can still commit an id at or below the head
-- has an older one, as the load's observation does. A record row comes first: recorded false when
-- the range's lease was lost (nothing written, nothing claimed); otherwise committed (the cursor
-- after the record) and what the load would say about the group: paused, an expired range lease to
-- reclaim, exception runs to expire, exception rows due (reservable). Any of those stops here and
-- the caller turns to them, except due rows when p_rec_past_due: then the next range is claimed
-- all the same and the exception phase runs when the chain ends
-- (docs/protocol/poll-cycle.md#due-rows-and-the-chain).
--
-- The claim answers without the range's messages (docs/protocol/poll-cycle.md#the-claims-answer): it
-- measures the payloads against p_bytes (docs/protocol/poll-cycle.md#the-byte-bound), moves the cursor,
-- writes the lease, and returns a header row (r_low, r_high, and lease_ms, the length of the lease
-- written, NULL when no message needed one) or, when producers hold the fence, up to five fence
-- holder rows (payload: {pid, age_ms, app, statement}; options: {"fence": true}). The client reads
-- the lease's messages with a plain SELECT in the same transaction and round trip (claimRead in
-- packages/core/src/sql/cycle.ts), which sends rows as it reads them where a plpgsql function
-- would buffer them all first.
--
-- With p_rate (a group's resolved rateLimit), the range is cut to the messages the group's bucket
-- grants tokens for (take_tokens, docs/protocol/poll-cycle.md#rate-limit): the ones held back stay
-- beyond the cursor. A claim granted fewer tokens than it had messages answers, before its header
-- (or instead of it, when none was granted), a row with options {"rateLimited": ms until the next
-- token}. The bucket is locked first, before the record.
-- With p_own set (a claim ahead, docs/protocol/poll-cycle.md#claiming-ahead) the lease is written
-- `released`: nothing of it is started until one of the statements sent as it starts clears that
-- (this one with a record, for the leases in p_own; record_range_N and record_take_keys_N with
-- p_start), so a crash before then is no reclaim (docs/protocol/crash-recovery.md#quarantine).
CREATE OR REPLACE FUNCTION {{schema}}.claim_{{N}}(
  p_group BIGINT, p_batch BIGINT, p_head BIGINT, p_obs XID8, p_token UUID,
  p_timeout_default BIGINT, p_timeout_min BIGINT, p_timeout_max BIGINT,
  p_concurrency INTEGER, p_margin BIGINT, p_cap_ms BIGINT, p_bytes BIGINT,
  p_rec_token UUID DEFAULT NULL, p_rec_eq JSONB DEFAULT NULL, p_rec_dl JSONB DEFAULT NULL,
  p_rec_keys JSONB DEFAULT NULL, p_rec_past_due BOOLEAN DEFAULT false, p_own UUID[] DEFAULT NULL,
  p_rate JSONB DEFAULT NULL)
RETURNS TABLE (r_low BIGINT, r_high BIGINT, id BIGINT, message_key TEXT,
               compaction_rank BIGINT, payload TEXT, options JSONB, created_ms FLOAT8,
               lease_ms BIGINT, recorded BOOLEAN, committed BIGINT, paused BOOLEAN,
               reclaimable BOOLEAN, expirable BOOLEAN, reservable BOOLEAN)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  c RECORD;
  v_head BIGINT := p_head;
  v_obs XID8 := p_obs;
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
  v_last BIGINT;
  v_ms BIGINT;
  v_id BIGINT;
  v_len BIGINT;
  v_packed BOOLEAN;
  v_override TEXT;
  v_default TEXT;
  v_stop BIGINT;
  v_rate RECORD;
BEGIN
  IF p_rate IS NOT NULL THEN
    PERFORM {{schema}}.take_tokens(p_group, 0, p_rate);
  END IF;
  IF p_rec_token IS NOT NULL THEN
    -- The head first: this statement's snapshot is older than the transaction id the record
    -- assigns below, which is the observation.
    SELECT COALESCE(max(m.id), 0) INTO v_head FROM {{schema}}.message_log_{{N}} m;
    committed := {{schema}}.record_range_{{N}}(p_group, p_rec_token, NULL, NULL, p_rec_eq, p_rec_dl, p_rec_keys);
    -- The caller's own range starts as this statement goes out.
    IF p_own IS NOT NULL THEN
      UPDATE {{schema}}.claim_lease_{{N}} l SET released = false
       WHERE l.consumer_group_id = p_group AND l.token = ANY (p_own) AND l.released;
    END IF;
    recorded := committed IS NOT NULL;
    IF recorded THEN
      SELECT f.paused, f.reclaimable, f.expirable, f.reservable
        INTO paused, reclaimable, expirable, reservable
        FROM {{schema}}.group_flags_{{N}}(p_group) f;
    END IF;
    RETURN NEXT;
    IF NOT recorded OR paused OR reclaimable OR expirable OR (reservable AND NOT p_rec_past_due) THEN RETURN; END IF;
    recorded := NULL; committed := NULL; paused := NULL; reclaimable := NULL; expirable := NULL; reservable := NULL;
    v_obs := pg_current_xact_id();
  END IF;
  SELECT cur.claimed, cur.settled_head, cur.pending_head, cur.pending_xid INTO c
    FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  -- Proof, the cheap test: every transaction of the cluster older than an observation has ended.
  v_xmin := pg_snapshot_xmin(pg_current_snapshot());
  v_gate := c.settled_head;
  v_obs_ok := v_obs IS NULL OR v_obs = '0'::xid8 OR v_xmin >= v_obs;
  v_pending_ok := c.pending_xid IS NULL OR c.pending_head <= c.settled_head OR v_xmin >= c.pending_xid;
  -- The precise test when the cheap one fails (docs/protocol/poll-cycle.md#the-fence).
  IF NOT (v_obs_ok AND v_pending_ok) THEN
    IF EXISTS (SELECT 1 FROM {{schema}}.fence_holders_{{N}}()) THEN
      v_blocked := true;
    ELSE
      v_obs_ok := true;
      v_pending_ok := true;
    END IF;
  END IF;
  IF v_obs IS NOT NULL AND v_obs <> '0'::xid8 AND v_obs_ok THEN
    v_gate := GREATEST(v_gate, v_head);
  END IF;
  IF c.pending_xid IS NOT NULL AND v_pending_ok THEN
    v_gate := GREATEST(v_gate, c.pending_head);
  END IF;
  v_low := c.claimed;
  v_high := GREATEST(v_low, LEAST(c.claimed + p_batch, v_gate));
  -- Keys held by another poll's open range (docs/protocol/ordering.md#ranges-of-several-pollers): the range
  -- ends before its first exclusive or ordered keyed message whose key has a message in another
  -- range lease of the group (in flight, released or expired; p_own names the caller's own
  -- leases, a range it runs while it claims the next one). Such a message could only be deferred
  -- (its key busy, or its predecessor unresolved), and every later one of its key after it, so
  -- it is left for a claim after that range records. A range cut to nothing claims nothing.
  IF v_high > v_low AND EXISTS (
       SELECT 1 FROM {{schema}}.claim_lease_{{N}} l
        WHERE l.consumer_group_id = p_group AND l.token <> ALL (COALESCE(p_own, '{}'::uuid[]))) THEN
    SELECT g.config->>'concurrencyOverride', g.config->'message'->>'concurrency' INTO v_override, v_default
      FROM {{schema}}.consumer_group_config g WHERE g.id = p_group;
    IF v_override IS DISTINCT FROM 'parallel' THEN
      SELECT min(m.id) INTO v_stop
        FROM {{schema}}.message_log_{{N}} m
       WHERE m.id > v_low AND m.id <= v_high
         AND {{schema}}.keyed_{{N}}(m.message_key, COALESCE(v_override, m.options->>'concurrency', v_default, 'parallel'))
         AND EXISTS (SELECT 1 FROM {{schema}}.claim_lease_{{N}} l
                       JOIN {{schema}}.message_log_{{N}} o
                         ON o.message_key = m.message_key AND o.id > l.low AND o.id <= l.high
                      WHERE l.consumer_group_id = p_group
                        AND l.token <> ALL (COALESCE(p_own, '{}'::uuid[])));
      IF v_stop IS NOT NULL THEN
        v_high := v_stop - 1;
      END IF;
    END IF;
  END IF;
  v_n := 0;
  IF v_high > v_low THEN
    -- The range's deliverable rows in id order, each payload measured and not kept. This query's
    -- fresh snapshot (taken after the cursor lock) sees every id <= the gate that will ever commit;
    -- claimRead, after this statement, reads the lease's range with a newer snapshot that sees
    -- every id this one saw (a row it no longer finds a compaction head for was superseded, and is
    -- passed). A payload stored uncompressed counts its stored size (its JSON text as produced, the
    -- column being json, plus the varlena header), read from the row without copying it; a
    -- compressed one (a large payload) counts its JSON text (docs/protocol/poll-cycle.md#the-byte-bound). First the whole range in one pass: when nothing in it is
    -- compressed and its stored sizes fit the bound, all of it goes.
    SELECT count(*), COALESCE(sum(pg_column_size(l.payload)), 0), COALESCE(bool_or(pg_column_compression(l.payload) IS NOT NULL), false)
      INTO v_n, v_bytes, v_packed
      FROM {{schema}}.deliverable_{{N}}(v_low, v_high) l;
    IF v_packed OR v_bytes > p_bytes THEN
      -- Else row by row: the first message always, then while the running sum stays within
      -- p_bytes; the range ends at the last message counted, and payloads past the bound are
      -- never converted.
      v_n := 0;
      v_bytes := 0;
      FOR v_id, v_len IN
        SELECT l.id, CASE WHEN pg_column_compression(l.payload) IS NULL THEN pg_column_size(l.payload)
                          ELSE octet_length(l.payload::text) END
          FROM {{schema}}.deliverable_{{N}}(v_low, v_high) l
         ORDER BY l.id
      LOOP
        v_bytes := v_bytes + v_len;
        IF v_bytes > p_bytes AND v_n > 0 THEN
          v_high := v_last;
          EXIT;
        END IF;
        v_n := v_n + 1;
        v_last := v_id;
      END LOOP;
    END IF;
  END IF;
  IF p_rate IS NOT NULL AND v_n > 0 THEN
    SELECT t.granted, t.wait_ms INTO v_rate FROM {{schema}}.take_tokens(p_group, v_n, p_rate) t;
    IF v_rate.granted < v_n THEN
      v_n := v_rate.granted;
      IF v_n = 0 THEN
        v_high := v_low;
      ELSE
        SELECT max(x.id) INTO v_high FROM (
          SELECT l.id FROM {{schema}}.message_log_{{N}} l
           WHERE l.id > v_low AND l.id <= v_high
             AND (l.compaction_rank IS NULL OR EXISTS (
                   SELECT 1 FROM {{schema}}.compaction_head_{{N}} h
                    WHERE h.compaction_key = l.message_key AND h.message_id = l.id))
           ORDER BY l.id LIMIT v_n) x;
      END IF;
      options := jsonb_build_object('rateLimited', v_rate.wait_ms);
      RETURN NEXT;
      options := NULL;
    END IF;
  END IF;
  UPDATE {{schema}}.consumer_group_cursor_{{N}}
     SET claimed = v_high, settled_head = v_gate,
         pending_head = GREATEST(pending_head, v_head),
         pending_xid = GREATEST(pending_xid, NULLIF(v_obs, '0'::xid8)),
         updated_at = now()
   WHERE consumer_group_id = p_group;
  IF v_high = v_low THEN
    -- Held back by this stream's producers: say who (the caller warns about old ones).
    IF v_blocked THEN
      RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint,
                          jsonb_build_object('pid', f.pid, 'age_ms', f.xact_age_ms, 'app', f.application_name,
                                             'statement', f.statement)::text,
                          '{"fence": true}'::jsonb, NULL::float8, NULL::bigint, NULL::boolean, NULL::bigint,
                          NULL::boolean, NULL::boolean, NULL::boolean, NULL::boolean
                     FROM {{schema}}.fence_holders_{{N}}() f LIMIT 5;
    END IF;
    RETURN;
  END IF;
  -- Nothing to deliver (gaps, filtered non-heads): no lease; the cursor advance passes the ids.
  IF v_n > 0 THEN
    v_tmax := p_timeout_default;
    IF p_timeout_max > p_timeout_default THEN
      SELECT GREATEST(
               max({{schema}}.message_timeout_{{N}}(m.options, p_timeout_default, p_timeout_min, p_timeout_max)),
               CASE WHEN count(*) < v_n THEN p_timeout_default END)
        INTO v_tmax
        FROM {{schema}}.message_log_{{N}} m
       WHERE m.id > v_low AND m.id <= v_high AND m.options ? 'timeout';
      v_tmax := COALESCE(v_tmax, p_timeout_default);
    END IF;
    v_ms := {{schema}}.lease_ms_{{N}}(v_tmax, v_n, p_concurrency, p_margin, p_cap_ms);
    INSERT INTO {{schema}}.claim_lease_{{N}} (consumer_group_id, token, low, high, expires_at, released)
    VALUES (p_group, p_token, v_low, v_high, now() + v_ms * interval '1 millisecond', COALESCE(cardinality(p_own), 0) > 0);
  END IF;
  r_low := v_low; r_high := v_high; id := NULL; message_key := NULL; compaction_rank := NULL;
  payload := NULL; options := NULL; created_ms := NULL; lease_ms := v_ms;
  RETURN NEXT;
END
$fn$;
