-- SQLStreams per-stream table family, version 1.
-- Placeholders: {{schema}} is the validated, double-quoted schema name; {{N}} is the numeric
-- stream id (stream_config.id); {{partition_size}} is the stream's numeric partition size.
-- No other text is substituted: stream names, group names, keys and payloads never reach SQL text.

CREATE SEQUENCE IF NOT EXISTS {{schema}}.message_log_{{N}}_id_seq AS BIGINT START 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS {{schema}}.message_log_{{N}} (
  id              BIGINT NOT NULL DEFAULT nextval('{{schema}}.message_log_{{N}}_id_seq'),
  message_key     TEXT NULL,
  compaction_rank BIGINT NULL,
  routing_key     TEXT NULL,
  schema_version  INTEGER NOT NULL DEFAULT 1,
  payload         JSONB NOT NULL,
  options         JSONB NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (id)
) PARTITION BY RANGE (id);

ALTER SEQUENCE {{schema}}.message_log_{{N}}_id_seq OWNED BY {{schema}}.message_log_{{N}}.id;

CREATE TABLE IF NOT EXISTS {{schema}}.message_log_{{N}}_0
  PARTITION OF {{schema}}.message_log_{{N}} FOR VALUES FROM (0) TO ({{partition_size}});

CREATE INDEX IF NOT EXISTS message_log_{{N}}_message_key
  ON {{schema}}.message_log_{{N}} (message_key, id) WHERE message_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.exception_queue_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  message_id        BIGINT NOT NULL,
  status            TEXT NOT NULL CHECK (status IN ('ready', 'deferred', 'inflight', 'dead', 'superseded')),
  message_key       TEXT NULL,
  concurrency       TEXT NOT NULL CHECK (concurrency IN ('parallel', 'exclusive', 'ordered')),
  attempts          INTEGER NOT NULL DEFAULT 0,
  delays            INTEGER NOT NULL DEFAULT 0,
  can_run_after     TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_error        TEXT NULL,
  lease_token       UUID NULL,
  lease_expires_at  TIMESTAMPTZ NULL,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_group_id, message_id),
  CHECK (attempts >= delays),
  CHECK (delays >= 0),
  CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL)),
  CHECK (status <> 'inflight' OR lease_token IS NOT NULL),
  CHECK (status NOT IN ('dead', 'superseded') OR lease_token IS NULL)
);
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_key
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, message_key, message_id) WHERE message_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_due
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, status, can_run_after);

CREATE TABLE IF NOT EXISTS {{schema}}.delivery_log_{{N}} (
  id                BIGSERIAL PRIMARY KEY,
  consumer_group_id BIGINT NOT NULL,
  message_id        BIGINT NOT NULL,
  attempt           INTEGER NOT NULL,
  status            TEXT NOT NULL CHECK (status IN ('failure', 'delayed', 'deferred', 'superseded', 'expired', 'killed', 'success', 'redriven')),
  error             TEXT NOT NULL DEFAULT '',
  attempted_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS delivery_log_{{N}}_group_message
  ON {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt);
CREATE INDEX IF NOT EXISTS delivery_log_{{N}}_message
  ON {{schema}}.delivery_log_{{N}} (message_id);

CREATE TABLE IF NOT EXISTS {{schema}}.consumer_group_cursor_{{N}} (
  consumer_group_id BIGINT PRIMARY KEY REFERENCES {{schema}}.consumer_group_config (id) ON DELETE CASCADE,
  claimed           BIGINT NOT NULL DEFAULT 0,
  committed         BIGINT NOT NULL DEFAULT 0,
  settled_head      BIGINT NOT NULL DEFAULT 0,
  pending_head      BIGINT NOT NULL DEFAULT 0,
  pending_xid       XID8 NULL,
  updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {{schema}}.claim_lease_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  token             UUID NOT NULL,
  low               BIGINT NOT NULL,
  high              BIGINT NOT NULL,
  expires_at        TIMESTAMPTZ NOT NULL,
  reclaims          INTEGER NOT NULL DEFAULT 0,
  released          BOOLEAN NOT NULL DEFAULT false,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_group_id, token),
  CHECK (low < high)
);
CREATE INDEX IF NOT EXISTS claim_lease_{{N}}_expiry
  ON {{schema}}.claim_lease_{{N}} (consumer_group_id, expires_at);

CREATE TABLE IF NOT EXISTS {{schema}}.message_key_lease_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  message_key       TEXT NOT NULL,
  token             UUID NOT NULL,
  expires_at        TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (consumer_group_id, message_key)
);

CREATE TABLE IF NOT EXISTS {{schema}}.compaction_head_{{N}} (
  compaction_key  TEXT PRIMARY KEY,
  message_id      BIGINT NULL,
  compaction_rank BIGINT NULL,
  schema_version  INTEGER NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  CHECK ((message_id IS NULL) = (compaction_rank IS NULL))
);
CREATE INDEX IF NOT EXISTS compaction_head_{{N}}_empty
  ON {{schema}}.compaction_head_{{N}} (updated_at) WHERE message_id IS NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.idempotency_key_{{N}} (
  idempotency_key UUID PRIMARY KEY,
  message_id      BIGINT NOT NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idempotency_key_{{N}}_created
  ON {{schema}}.idempotency_key_{{N}} (created_at);

-- ---------------------------------------------------------------------------------------------
-- Protocol functions. Each is one round trip for the poll that calls it. They are VOLATILE, so
-- every statement inside takes a fresh READ COMMITTED snapshot: the fresh claim reads the range
-- only after it holds the cursor row lock (docs/poll-cycle.md#the-fence).
-- ---------------------------------------------------------------------------------------------

-- Committed cursor advance (docs/poll-cycle.md#cursor-advance): one read of claimed, leases and unresolved rows, then a
-- guarded write of the value read. Rows at or below committed (put back by redrive) do not hold it.
CREATE OR REPLACE FUNCTION {{schema}}.advance_{{N}}(p_group BIGINT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_target BIGINT;
  v_committed BIGINT;
BEGIN
  SELECT LEAST(cur.claimed,
               (SELECT min(l.low) FROM {{schema}}.claim_lease_{{N}} l WHERE l.consumer_group_id = p_group),
               (SELECT min(e.message_id) - 1 FROM {{schema}}.exception_queue_{{N}} e
                 WHERE e.consumer_group_id = p_group AND e.message_id > cur.committed
                   AND e.status IN ('ready', 'inflight', 'deferred'))),
         cur.committed
    INTO v_target, v_committed
    FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group;
  IF v_target > v_committed THEN
    UPDATE {{schema}}.consumer_group_cursor_{{N}} SET committed = v_target, updated_at = now()
     WHERE consumer_group_id = p_group AND committed < v_target;
    RETURN v_target;
  END IF;
  RETURN v_committed;
END
$fn$;

-- Fresh range claim with the snapshot fence (docs/poll-cycle.md#the-fence steps 1-6 and the lease of docs/poll-cycle.md#the-range-lease).
-- Returns no row when nothing was claimed (low = high); otherwise a header row (r_low, r_high,
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
BEGIN
  SELECT cur.claimed, cur.settled_head, cur.pending_head, cur.pending_xid INTO c
    FROM {{schema}}.consumer_group_cursor_{{N}} cur WHERE cur.consumer_group_id = p_group FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  -- Proof: every transaction older than an observation has ended.
  v_xmin := pg_snapshot_xmin(pg_current_snapshot());
  v_gate := c.settled_head;
  IF p_obs IS NOT NULL AND p_obs <> '0'::xid8 AND v_xmin >= p_obs THEN
    v_gate := GREATEST(v_gate, p_head);
  END IF;
  IF c.pending_xid IS NOT NULL AND v_xmin >= c.pending_xid THEN
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
  IF v_high = v_low THEN RETURN; END IF;

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

-- Record a range's outcomes and advance the cursor (docs/poll-cycle.md#recording-a-range, docs/poll-cycle.md#cursor-advance) in one transaction.
-- p_keep_from NULL: the range is done, its lease is deleted. Otherwise the prefix up to
-- p_keep_from is recorded and the rest released at once under p_new_token.
-- p_keys lists the key leases ({k, t}) the range's chains took, released here in one go.
-- Returns the committed cursor afterwards, or NULL when the lease was lost (nothing written).
CREATE OR REPLACE FUNCTION {{schema}}.record_range_{{N}}(
  p_group BIGINT, p_token UUID, p_keep_from BIGINT, p_new_token UUID, p_eq JSONB, p_dl JSONB, p_keys JSONB)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  -- Key leases the range's chains held are released whatever happens to the range lease.
  IF p_keys IS NOT NULL AND jsonb_array_length(p_keys) > 0 THEN
    DELETE FROM {{schema}}.message_key_lease_{{N}} k
     USING jsonb_to_recordset(p_keys) AS r(k TEXT, t UUID)
     WHERE k.consumer_group_id = p_group AND k.message_key = r.k AND k.token = r.t;
  END IF;
  IF p_keep_from IS NULL THEN
    DELETE FROM {{schema}}.claim_lease_{{N}} WHERE consumer_group_id = p_group AND token = p_token;
  ELSE
    UPDATE {{schema}}.claim_lease_{{N}}
       SET low = p_keep_from, expires_at = now(), released = true, token = p_new_token
     WHERE consumer_group_id = p_group AND token = p_token;
  END IF;
  IF NOT FOUND THEN RETURN NULL; END IF;
  IF p_eq IS NOT NULL AND jsonb_array_length(p_eq) > 0 THEN
    INSERT INTO {{schema}}.exception_queue_{{N}}
      (consumer_group_id, message_id, status, message_key, concurrency, attempts, delays, can_run_after, last_error)
    SELECT p_group, r.message_id, r.status, r.message_key, r.concurrency, r.attempts, r.delays,
           now() + r.run_after_ms * interval '1 millisecond', r.last_error
      FROM jsonb_to_recordset(p_eq) AS r(message_id BIGINT, status TEXT, message_key TEXT, concurrency TEXT,
                                         attempts INTEGER, delays INTEGER, run_after_ms BIGINT, last_error TEXT)
    ON CONFLICT DO NOTHING;
  END IF;
  IF p_dl IS NOT NULL AND jsonb_array_length(p_dl) > 0 THEN
    INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
    SELECT p_group, r.message_id, r.attempt, r.status, r.error
      FROM jsonb_to_recordset(p_dl) AS r(message_id BIGINT, attempt INTEGER, status TEXT, error TEXT);
  END IF;
  RETURN {{schema}}.advance_{{N}}(p_group);
END
$fn$;

-- Take the key lease of (group, key) for one run (docs/ordering.md#key-leases), after the compaction head check
-- (docs/poll-cycle.md#dispatch step 4) and, for ordered messages, the predecessor checks (docs/ordering.md#the-predecessor-rule), in one transaction.
-- Returns NULL when taken, else 'busy', 'pred:<id>' or 'superseded:<head id>'.
CREATE OR REPLACE FUNCTION {{schema}}.take_key_{{N}}(
  p_group BIGINT, p_key TEXT, p_token UUID, p_ms BIGINT, p_message_id BIGINT,
  p_ordered BOOLEAN, p_own_low BIGINT, p_own_high BIGINT, p_compacted BOOLEAN)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_head BIGINT;
  v_pred BIGINT;
  v_committed BIGINT;
BEGIN
  IF p_compacted THEN
    SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = p_key;
    IF v_head IS DISTINCT FROM p_message_id THEN
      RETURN 'superseded:' || COALESCE(v_head::text, 'none');
    END IF;
  END IF;
  IF p_ordered THEN
    SELECT min(e.message_id) INTO v_pred FROM {{schema}}.exception_queue_{{N}} e
     WHERE e.consumer_group_id = p_group AND e.message_key = p_key AND e.message_id < p_message_id
       AND e.status IN ('ready', 'inflight', 'deferred');
    IF v_pred IS NULL THEN
      SELECT cur.committed INTO v_committed FROM {{schema}}.consumer_group_cursor_{{N}} cur
       WHERE cur.consumer_group_id = p_group;
      SELECT min(m.id) INTO v_pred FROM {{schema}}.message_log_{{N}} m
       WHERE m.message_key = p_key AND m.id > v_committed AND m.id < p_message_id
         AND NOT (m.id > p_own_low AND m.id <= p_own_high);
    END IF;
    IF v_pred IS NOT NULL THEN RETURN 'pred:' || v_pred; END IF;
  END IF;
  INSERT INTO {{schema}}.message_key_lease_{{N}} AS k (consumer_group_id, message_key, token, expires_at)
  VALUES (p_group, p_key, p_token, now() + p_ms * interval '1 millisecond')
  ON CONFLICT (consumer_group_id, message_key) DO UPDATE
     SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
   WHERE k.expires_at < now() OR k.token = EXCLUDED.token;
  IF NOT FOUND THEN RETURN 'busy'; END IF;
  RETURN NULL;
END
$fn$;

-- Take the key leases of a range's keyed chains in one round trip (docs/ordering.md#key-leases, docs/ordering.md#the-predecessor-rule, docs/ordering.md#chains-inside-a-range): one
-- row per key of p_keys ({k, id, ordered, ms}), `id` being the chain member the ordered checks are
-- made for, `ms` the lease length of its run. `result` is NULL when the lease was taken under
-- p_token, else 'busy' or 'pred:<id>'. Keys are taken in key order, so concurrent polls lock
-- lease rows in the same order. (Compacted members check their head at their own start.)
CREATE OR REPLACE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, result TEXT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  r RECORD;
  v_committed BIGINT;
  v_pred BIGINT;
BEGIN
  SELECT cur.committed INTO v_committed FROM {{schema}}.consumer_group_cursor_{{N}} cur
   WHERE cur.consumer_group_id = p_group;
  FOR r IN SELECT x.k AS key, x.id, x.ordered, x.ms
             FROM jsonb_to_recordset(p_keys) AS x(k TEXT, id BIGINT, ordered BOOLEAN, ms BIGINT)
            ORDER BY x.k
  LOOP
    v_pred := NULL;
    IF r.ordered THEN
      SELECT min(e.message_id) INTO v_pred FROM {{schema}}.exception_queue_{{N}} e
       WHERE e.consumer_group_id = p_group AND e.message_key = r.key AND e.message_id < r.id
         AND e.status IN ('ready', 'inflight', 'deferred');
      IF v_pred IS NULL THEN
        SELECT min(m.id) INTO v_pred FROM {{schema}}.message_log_{{N}} m
         WHERE m.message_key = r.key AND m.id > v_committed AND m.id < r.id
           AND NOT (m.id > p_own_low AND m.id <= p_own_high);
      END IF;
    END IF;
    k := r.key;
    IF v_pred IS NOT NULL THEN
      result := 'pred:' || v_pred;
    ELSE
      INSERT INTO {{schema}}.message_key_lease_{{N}} AS l (consumer_group_id, message_key, token, expires_at)
      VALUES (p_group, r.key, p_token, now() + r.ms * interval '1 millisecond')
      ON CONFLICT (consumer_group_id, message_key) DO UPDATE
         SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
       WHERE l.expires_at < now() OR l.token = EXCLUDED.token;
      result := CASE WHEN FOUND THEN NULL ELSE 'busy' END;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- Start one reserved exception row (docs/poll-cycle.md#the-exception-phase): guarded by the reservation token; supersede,
-- defer or claim it (status inflight under its own run lease). Returns 'lost', 'started',
-- 'superseded:<head>' or 'deferred:<reason>'.
CREATE OR REPLACE FUNCTION {{schema}}.start_exception_{{N}}(
  p_group BIGINT, p_message_id BIGINT, p_token UUID, p_key_token UUID, p_run_ms BIGINT, p_log BOOLEAN)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  r RECORD;
  v_rank BIGINT;
  v_head BIGINT;
  v_key_result TEXT;
  v_reason TEXT;
BEGIN
  SELECT e.message_key, e.concurrency, e.attempts, e.status INTO r FROM {{schema}}.exception_queue_{{N}} e
   WHERE e.consumer_group_id = p_group AND e.message_id = p_message_id AND e.lease_token = p_token
     AND e.status IN ('ready', 'deferred', 'inflight')
   FOR UPDATE;
  IF NOT FOUND THEN RETURN 'lost'; END IF;
  -- Only this start makes the row inflight under the reservation token: finding it so means the
  -- caller is repeating a start whose commit it never heard about. Idempotent, so the handler
  -- still runs instead of the row sitting out its run lease and being charged an attempt.
  IF r.status = 'inflight' THEN RETURN 'started'; END IF;
  SELECT m.compaction_rank INTO v_rank FROM {{schema}}.message_log_{{N}} m WHERE m.id = p_message_id;
  IF NOT FOUND THEN RETURN 'lost'; END IF;
  IF v_rank IS NOT NULL THEN
    SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = r.message_key;
    IF v_head IS DISTINCT FROM p_message_id THEN
      UPDATE {{schema}}.exception_queue_{{N}}
         SET status = 'superseded', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
       WHERE consumer_group_id = p_group AND message_id = p_message_id;
      IF p_log THEN
        INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
        VALUES (p_group, p_message_id, r.attempts, 'superseded', 'superseded by ' || COALESCE(v_head::text, 'none'));
      END IF;
      RETURN 'superseded:' || COALESCE(v_head::text, 'none');
    END IF;
  END IF;
  IF r.concurrency IN ('exclusive', 'ordered') AND r.message_key IS NOT NULL THEN
    v_key_result := {{schema}}.take_key_{{N}}(p_group, r.message_key, p_key_token, p_run_ms, p_message_id,
                                              r.concurrency = 'ordered', 0, 0, false);
    IF v_key_result IS NOT NULL THEN
      v_reason := CASE WHEN v_key_result = 'busy' THEN 'deferred: key busy'
                       ELSE 'deferred: ordered predecessor ' || substr(v_key_result, 6) || ' unresolved' END;
      UPDATE {{schema}}.exception_queue_{{N}}
         SET status = 'deferred', lease_token = NULL, lease_expires_at = NULL, can_run_after = now(),
             updated_at = now()
       WHERE consumer_group_id = p_group AND message_id = p_message_id;
      IF p_log THEN
        INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
        VALUES (p_group, p_message_id, r.attempts, 'deferred', v_reason);
      END IF;
      RETURN 'deferred:' || v_reason;
    END IF;
  END IF;
  UPDATE {{schema}}.exception_queue_{{N}}
     SET status = 'inflight', lease_expires_at = now() + p_run_ms * interval '1 millisecond', updated_at = now()
   WHERE consumer_group_id = p_group AND message_id = p_message_id;
  RETURN 'started';
END
$fn$;

-- Record the outcome of one exception-row run (docs/poll-cycle.md#the-exception-phase, docs/exception-lifecycle.md#retries), guarded by the row's lease
-- token; releases the run's key lease. Returns 0 when the row lease was lost (nothing written),
-- 1 when recorded, 2 when recorded but the key lease had already been taken over.
CREATE OR REPLACE FUNCTION {{schema}}.record_exception_{{N}}(
  p_group BIGINT, p_message_id BIGINT, p_token UUID, p_key TEXT, p_key_token UUID,
  p_status TEXT, p_attempts INTEGER, p_delays INTEGER, p_run_after_ms BIGINT, p_last_error TEXT,
  p_dl_status TEXT, p_dl_attempt INTEGER, p_dl_error TEXT)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_result INTEGER := 1;
BEGIN
  IF p_status = 'deleted' THEN
    DELETE FROM {{schema}}.exception_queue_{{N}}
     WHERE consumer_group_id = p_group AND message_id = p_message_id AND lease_token = p_token;
  ELSE
    UPDATE {{schema}}.exception_queue_{{N}}
       SET status = p_status, attempts = p_attempts, delays = p_delays,
           can_run_after = CASE WHEN p_run_after_ms IS NULL THEN can_run_after
                                ELSE now() + p_run_after_ms * interval '1 millisecond' END,
           last_error = COALESCE(p_last_error, last_error),
           lease_token = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE consumer_group_id = p_group AND message_id = p_message_id AND lease_token = p_token;
  END IF;
  IF NOT FOUND THEN RETURN 0; END IF;
  IF p_key_token IS NOT NULL THEN
    DELETE FROM {{schema}}.message_key_lease_{{N}}
     WHERE consumer_group_id = p_group AND message_key = p_key AND token = p_key_token;
    IF NOT FOUND THEN v_result := 2; END IF;
  END IF;
  IF p_dl_status IS NOT NULL THEN
    INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
    VALUES (p_group, p_message_id, p_dl_attempt, p_dl_status, p_dl_error);
  END IF;
  RETURN v_result;
END
$fn$;
