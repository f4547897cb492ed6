-- SQLStreams control plane, version 2: produce from SQL (docs/producing.md#producing-from-sql).
-- __SCHEMA__ is replaced by the validated, double-quoted schema name; nothing else is substituted.
--
--   SELECT __SCHEMA__.produce('orders.placed', '{"orderId": "o-1"}', key => 'customer-7');
--
-- The same rules as the library's produce: the same checks in the same order with the same codes
-- (raised with the code at the start of the message, SQLSTATE 22023 for bad input, 42704 for an
-- unregistered stream), the transaction id taken before the message id (the fence's rule), the
-- idempotency key stored as the same UUID (verbatim when it is one, else the version-5 UUID of its
-- UTF-8 bytes), the compaction head upserted in the same transaction. It runs in the caller's
-- transaction, so the message commits or rolls back with it. Partitions are not created here
-- (creating one would lock the log until the caller commits): maintain() and library producers
-- keep them ahead, and a missing one is SQL0022.

-- SHA-1 of a byte string, for the version-5 idempotency UUID (pgcrypto is not assumed).
CREATE OR REPLACE FUNCTION __SCHEMA__.sha1_bytes(p_data BYTEA) RETURNS BYTEA
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  m32 CONSTANT BIGINT := 4294967295;
  h BIGINT[] := ARRAY[1732584193, 4023233417, 2562383102, 271733878, 3285377520]::BIGINT[];
  msg BYTEA;
  w BIGINT[];
  a BIGINT; b BIGINT; c BIGINT; d BIGINT; e BIGINT; f BIGINT; k BIGINT; t BIGINT;
  base INTEGER;
BEGIN
  msg := p_data || '\x80'::BYTEA;
  WHILE octet_length(msg) % 64 <> 56 LOOP
    msg := msg || '\x00'::BYTEA;
  END LOOP;
  msg := msg || int8send(octet_length(p_data)::BIGINT * 8);
  FOR chunk IN 0 .. octet_length(msg) / 64 - 1 LOOP
    base := chunk * 64;
    w := array_fill(0::BIGINT, ARRAY[80]);
    FOR i IN 0 .. 15 LOOP
      w[i + 1] := (get_byte(msg, base + i * 4)::BIGINT << 24) | (get_byte(msg, base + i * 4 + 1)::BIGINT << 16)
                | (get_byte(msg, base + i * 4 + 2)::BIGINT << 8) | get_byte(msg, base + i * 4 + 3)::BIGINT;
    END LOOP;
    FOR i IN 16 .. 79 LOOP
      t := w[i - 2] # w[i - 7] # w[i - 13] # w[i - 15];
      w[i + 1] := ((t << 1) | (t >> 31)) & m32;
    END LOOP;
    a := h[1]; b := h[2]; c := h[3]; d := h[4]; e := h[5];
    FOR i IN 0 .. 79 LOOP
      IF i < 20 THEN
        f := (b & c) | ((~b) & d); k := 1518500249;
      ELSIF i < 40 THEN
        f := b # c # d; k := 1859775393;
      ELSIF i < 60 THEN
        f := (b & c) | (b & d) | (c & d); k := 2400959708;
      ELSE
        f := b # c # d; k := 3395469782;
      END IF;
      t := ((((a << 5) | (a >> 27)) & m32) + (f & m32) + e + k + w[i + 1]) & m32;
      e := d; d := c; c := ((b << 30) | (b >> 2)) & m32; b := a; a := t;
    END LOOP;
    h[1] := (h[1] + a) & m32; h[2] := (h[2] + b) & m32; h[3] := (h[3] + c) & m32;
    h[4] := (h[4] + d) & m32; h[5] := (h[5] + e) & m32;
  END LOOP;
  RETURN substring(int8send(h[1]) FROM 5) || substring(int8send(h[2]) FROM 5) || substring(int8send(h[3]) FROM 5)
      || substring(int8send(h[4]) FROM 5) || substring(int8send(h[5]) FROM 5);
END
$fn$;

-- The UUID stored for an idempotency key: verbatim (lower-cased) when it is one, else version 5
-- in the library's namespace a7b11702-1bce-48fd-bb62-d476e1c647ce.
CREATE OR REPLACE FUNCTION __SCHEMA__.idempotency_uuid(p_key TEXT) RETURNS UUID
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  hash BYTEA;
BEGIN
  IF p_key ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
    RETURN lower(p_key)::UUID;
  END IF;
  hash := __SCHEMA__.sha1_bytes('\xa7b117021bce48fdbb62d476e1c647ce'::BYTEA || convert_to(p_key, 'UTF8'));
  hash := set_byte(hash, 6, (get_byte(hash, 6) & 15) | 80);
  hash := set_byte(hash, 8, (get_byte(hash, 8) & 63) | 128);
  RETURN encode(substring(hash FROM 1 FOR 16), 'hex')::UUID;
END
$fn$;

-- Raises a coded error the way the library words it: "<code> <what> (fix: <how>)".
CREATE OR REPLACE FUNCTION __SCHEMA__.raise_coded(p_code TEXT, p_message TEXT, p_fix TEXT, p_state TEXT DEFAULT '22023')
RETURNS VOID LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION '% % (fix: %)', p_code, p_message, p_fix USING ERRCODE = p_state, HINT = p_fix;
END
$fn$;

-- A number in a jsonb document checked against a range, as the library's option checks do.
CREATE OR REPLACE FUNCTION __SCHEMA__.check_number(p_code TEXT, p_path TEXT, p_value JSONB, p_min NUMERIC, p_max NUMERIC, p_integer BOOLEAN)
RETURNS VOID LANGUAGE plpgsql AS $fn$
BEGIN
  IF jsonb_typeof(p_value) <> 'number' THEN
    PERFORM __SCHEMA__.raise_coded(p_code, format('%s = %s: must be a finite number', p_path, p_value), 'use the documented ranges of the group configuration');
  END IF;
  IF p_integer AND p_value::NUMERIC <> trunc(p_value::NUMERIC) THEN
    PERFORM __SCHEMA__.raise_coded(p_code, format('%s = %s: must be an integer', p_path, p_value), 'use the documented ranges of the group configuration');
  END IF;
  IF p_value::NUMERIC < p_min OR p_value::NUMERIC > p_max THEN
    PERFORM __SCHEMA__.raise_coded(p_code, format('%s = %s: must be between %s and %s', p_path, p_value, p_min, p_max), 'use the documented ranges of the group configuration');
  END IF;
END
$fn$;

-- Checks message options (SQL0013, SQL0014) exactly as validateMessageOptions does.
CREATE OR REPLACE FUNCTION __SCHEMA__.check_message_options(p_message JSONB) RETURNS VOID
LANGUAGE plpgsql AS $fn$
DECLARE
  fix CONSTANT TEXT := 'use the documented ranges of the group configuration';
  k TEXT;
  r JSONB;
BEGIN
  IF jsonb_typeof(p_message) <> 'object' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0013', format('message = %s: must be an object', p_message), fix);
  END IF;
  FOR k IN SELECT jsonb_object_keys(p_message) LOOP
    IF k NOT IN ('timeout', 'concurrency', 'retry') THEN
      PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.%s = %s: unknown key; allowed keys: timeout, concurrency, retry', k, p_message -> k), fix);
    END IF;
  END LOOP;
  IF p_message ? 'timeout' THEN
    PERFORM __SCHEMA__.check_number('SQL0013', 'message.timeout', p_message -> 'timeout', 1, 86400000, true);
  END IF;
  IF p_message ? 'concurrency' AND (jsonb_typeof(p_message -> 'concurrency') <> 'string'
      OR p_message ->> 'concurrency' NOT IN ('parallel', 'exclusive', 'ordered')) THEN
    PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.concurrency = %s: must be one of parallel, exclusive, ordered', p_message -> 'concurrency'), fix);
  END IF;
  IF p_message ? 'retry' THEN
    r := p_message -> 'retry';
    IF jsonb_typeof(r) <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.retry = %s: must be an object', r), fix);
    END IF;
    FOR k IN SELECT jsonb_object_keys(r) LOOP
      IF k NOT IN ('maxRetries', 'maxDelays', 'baseDelay', 'maxDelay', 'exponent') THEN
        PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.retry.%s = %s: unknown key; allowed keys: maxRetries, maxDelays, baseDelay, maxDelay, exponent', k, r -> k), fix);
      END IF;
    END LOOP;
    IF r ? 'maxRetries' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxRetries', r -> 'maxRetries', 0, 1000, true); END IF;
    IF r ? 'maxDelays' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxDelays', r -> 'maxDelays', 0, 1000000, true); END IF;
    IF r ? 'baseDelay' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.baseDelay', r -> 'baseDelay', 1, 86400000, true); END IF;
    IF r ? 'maxDelay' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxDelay', r -> 'maxDelay', 1, 604800000, true); END IF;
    IF r ? 'exponent' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.exponent', r -> 'exponent', 1, 10, false); END IF;
    IF r ? 'baseDelay' AND r ? 'maxDelay' AND (r ->> 'maxDelay')::NUMERIC < (r ->> 'baseDelay')::NUMERIC THEN
      PERFORM __SCHEMA__.raise_coded('SQL0014', format('message.retry.maxDelay = %s: must be >= retry.baseDelay (%s)', r -> 'maxDelay', r -> 'baseDelay'),
        'make messageMin <= message <= messageMax, maxDelay >= baseDelay, and keep concurrency out of messageMin/messageMax');
    END IF;
  END IF;
END
$fn$;

-- Checks a key or idempotency key (SQL0018): 1 .. 1024 UTF-8 bytes (text cannot hold U+0000).
CREATE OR REPLACE FUNCTION __SCHEMA__.check_key(p_what TEXT, p_key TEXT) RETURNS VOID
LANGUAGE plpgsql AS $fn$
BEGIN
  IF p_key = '' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0018', format('%s must be a non-empty string, got ""', p_what), 'pass a non-empty string of at most 1024 UTF-8 bytes without U+0000');
  END IF;
  IF octet_length(p_key) > 1024 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0018', format('%s is %s UTF-8 bytes; the limit is 1024', p_what, octet_length(p_key)), 'pass a non-empty string of at most 1024 UTF-8 bytes without U+0000');
  END IF;
END
$fn$;

-- One message. options: {"message": {timeout, concurrency, retry}, "compaction": {"rank": n}}.
-- Returns the new message's id; for an idempotency key already stored, the first message's id.
CREATE OR REPLACE FUNCTION __SCHEMA__.produce(
  stream TEXT, payload JSONB, key TEXT DEFAULT NULL, idempotency_key TEXT DEFAULT NULL, options JSONB DEFAULT NULL)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_stream TEXT := produce.stream;
  v_payload JSONB := produce.payload;
  v_key TEXT := produce.key;
  v_idem TEXT := produce.idempotency_key;
  v_opts JSONB := produce.options;
  v_message JSONB;
  v_rank BIGINT;
  v_uuid UUID;
  v_sid BIGINT;
  v_max INTEGER;
  v_bytes INTEGER;
  v_id BIGINT;
  v_next BIGINT;
  v_size BIGINT;
  k TEXT;
BEGIN
  -- Arguments, in the library's order (docs/producing.md#validation).
  IF v_opts IS NOT NULL AND jsonb_typeof(v_opts) = 'null' THEN v_opts := NULL; END IF;
  IF v_opts IS NOT NULL THEN
    IF jsonb_typeof(v_opts) <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', 'options must be an object', 'correct the argument as the message says');
    END IF;
    FOR k IN SELECT jsonb_object_keys(v_opts) LOOP
      IF k NOT IN ('message', 'compaction') THEN
        PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.%s: unknown key; allowed: message, compaction (key and idempotency_key are arguments)', k),
          'correct the argument as the message says');
      END IF;
    END LOOP;
  END IF;
  IF v_payload IS NULL THEN
    PERFORM __SCHEMA__.raise_coded('SQL0016', 'payload cannot be stored as JSON: the payload is SQL NULL (use ''null''::jsonb for a JSON null) at payload',
      'convert the value at the named path to plain JSON');
  END IF;
  IF v_key IS NOT NULL THEN PERFORM __SCHEMA__.check_key('key', v_key); END IF;
  IF v_idem IS NOT NULL THEN
    PERFORM __SCHEMA__.check_key('idempotencyKey', v_idem);
    v_uuid := __SCHEMA__.idempotency_uuid(v_idem);
  END IF;
  v_message := NULLIF(v_opts -> 'message', 'null'::JSONB);
  IF v_message IS NOT NULL THEN
    PERFORM __SCHEMA__.check_message_options(v_message);
    IF v_message = '{}'::JSONB THEN v_message := NULL; END IF;
  END IF;
  IF v_message ->> 'concurrency' IN ('exclusive', 'ordered') AND v_key IS NULL THEN
    PERFORM __SCHEMA__.raise_coded('SQL0019', format('message.concurrency ''%s'' needs a key', v_message ->> 'concurrency'), 'add a key or use parallel');
  END IF;
  IF v_opts ? 'compaction' THEN
    IF jsonb_typeof(v_opts -> 'compaction') <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0020', 'compaction must be an object like { rank?: number }', 'add a key; use an integer rank');
    END IF;
    IF v_key IS NULL THEN
      PERFORM __SCHEMA__.raise_coded('SQL0020', 'compaction needs a key (the compaction key)', 'add a key; use an integer rank');
    END IF;
    IF v_opts -> 'compaction' ? 'rank' AND (jsonb_typeof(v_opts -> 'compaction' -> 'rank') <> 'number'
        OR (v_opts -> 'compaction' ->> 'rank')::NUMERIC <> trunc((v_opts -> 'compaction' ->> 'rank')::NUMERIC)
        OR abs((v_opts -> 'compaction' ->> 'rank')::NUMERIC) > 9007199254740991) THEN
      PERFORM __SCHEMA__.raise_coded('SQL0020', format('compaction.rank must be a safe integer, got %s', v_opts -> 'compaction' -> 'rank'), 'add a key; use an integer rank');
    END IF;
    FOR k IN SELECT jsonb_object_keys(v_opts -> 'compaction') LOOP
      IF k <> 'rank' THEN
        PERFORM __SCHEMA__.raise_coded('SQL0020', format('compaction.%s: unknown key; allowed: rank', k), 'add a key; use an integer rank');
      END IF;
    END LOOP;
    IF v_message ->> 'concurrency' = 'ordered' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0021', 'message.concurrency ''ordered'' cannot be combined with compaction', 'use exclusive, or drop compaction');
    END IF;
    v_rank := COALESCE((v_opts -> 'compaction' ->> 'rank')::NUMERIC, 0)::BIGINT;
  END IF;

  SELECT s.id, s.max_payload_bytes, s.partition_size INTO v_sid, v_max, v_size FROM __SCHEMA__.stream_config s WHERE s.name = v_stream;
  IF NOT FOUND THEN
    PERFORM __SCHEMA__.raise_coded('SQL0009', format('stream %s is not registered', to_jsonb(v_stream)), 'call stream.register() first', '42704');
  END IF;
  v_bytes := octet_length(v_payload::TEXT);
  IF v_bytes > v_max THEN
    PERFORM __SCHEMA__.raise_coded('SQL0017', format('payload is %s bytes of JSON; stream %s accepts at most %s', v_bytes, v_stream, v_max),
      'store large data elsewhere and send a reference, or raise maxPayloadBytes');
  END IF;

  -- The transaction id before the message id (docs/producing.md#the-xid-before-id-rule).
  PERFORM pg_current_xact_id();
  -- A partition for the next id (checked, not caught: an exception block would open a
  -- subtransaction per message). Should the sequence cross into a missing one between this check
  -- and the insert, the insert fails with Postgres's own 23514.
  EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM __SCHEMA__.message_log_%s_id_seq', v_sid) INTO v_next;
  IF to_regclass(format('__SCHEMA__.message_log_%s_%s', v_sid, v_next / v_size)) IS NULL THEN
    PERFORM __SCHEMA__.raise_coded('SQL0022', format('the partition for the next id (%s) of %s is missing', v_next, v_stream),
      'retry; run maintain(); check DDL rights', '55000');
  END IF;
  IF v_uuid IS NOT NULL THEN
    EXECUTE format('INSERT INTO __SCHEMA__.idempotency_key_%s (idempotency_key, message_id)
                    VALUES ($1, nextval(''__SCHEMA__.message_log_%s_id_seq''))
                    ON CONFLICT (idempotency_key) DO NOTHING RETURNING message_id', v_sid, v_sid)
      INTO v_id USING v_uuid;
    IF v_id IS NULL THEN
      -- Stored already (a concurrent first produce has committed by now: the insert waited for it).
      EXECUTE format('SELECT message_id FROM __SCHEMA__.idempotency_key_%s WHERE idempotency_key = $1', v_sid) INTO v_id USING v_uuid;
      RETURN v_id;
    END IF;
    EXECUTE format('INSERT INTO __SCHEMA__.message_log_%s (id, message_key, compaction_rank, payload, options)
                    VALUES ($1, $2, $3, $4, $5)', v_sid)
      USING v_id, v_key, v_rank, v_payload, v_message;
  ELSE
    EXECUTE format('INSERT INTO __SCHEMA__.message_log_%s (message_key, compaction_rank, payload, options)
                    VALUES ($1, $2, $3, $4) RETURNING id', v_sid)
      INTO v_id USING v_key, v_rank, v_payload, v_message;
  END IF;
  IF v_rank IS NOT NULL THEN
    EXECUTE format('INSERT INTO __SCHEMA__.compaction_head_%s AS h (compaction_key, message_id, compaction_rank, schema_version)
                    VALUES ($1, $2, $3, 1)
                    ON CONFLICT (compaction_key) DO UPDATE
                       SET message_id = EXCLUDED.message_id, compaction_rank = EXCLUDED.compaction_rank,
                           schema_version = 1, updated_at = now()
                     WHERE h.message_id IS NULL
                        OR (h.compaction_rank, h.message_id) < (EXCLUDED.compaction_rank, EXCLUDED.message_id)', v_sid)
      USING v_key, v_id, v_rank;
  END IF;
  RETURN v_id;
END
$fn$;

-- A batch: items is a JSON array of at most 1000 {"payload": ..., "key"?: text, "options"?: {...}}
-- (no idempotency keys, as in produceBatch). All or nothing with the caller's transaction; one id
-- per item, ascending in item order.
CREATE OR REPLACE FUNCTION __SCHEMA__.produce_batch(stream TEXT, items JSONB)
RETURNS SETOF BIGINT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_items JSONB := produce_batch.items;
  it JSONB;
  i INTEGER := 0;
  k TEXT;
BEGIN
  IF v_items IS NULL OR jsonb_typeof(v_items) <> 'array' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', 'produce_batch takes a JSON array of items', 'correct the argument as the message says');
  END IF;
  IF jsonb_array_length(v_items) > 1000 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', format('produce_batch takes at most 1000 items, got %s', jsonb_array_length(v_items)), 'correct the argument as the message says');
  END IF;
  FOR it IN SELECT e FROM jsonb_array_elements(v_items) WITH ORDINALITY AS t(e, ord) ORDER BY ord LOOP
    IF jsonb_typeof(it) <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', format('items[%s] must be an object { payload, key?, options? }', i), 'correct the argument as the message says');
    END IF;
    IF NOT it ? 'payload' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', format('items[%s].payload is missing', i), 'correct the argument as the message says');
    END IF;
    FOR k IN SELECT jsonb_object_keys(it) LOOP
      IF k NOT IN ('payload', 'key', 'options') THEN
        PERFORM __SCHEMA__.raise_coded('SQL0015', format('items[%s].%s: unknown key; allowed: payload, key, options (batch items cannot carry an idempotency key)', i, k),
          'correct the argument as the message says');
      END IF;
    END LOOP;
    IF it ? 'key' AND jsonb_typeof(it -> 'key') NOT IN ('string', 'null') THEN
      PERFORM __SCHEMA__.raise_coded('SQL0018', format('key must be a non-empty string, got %s', it -> 'key'), 'pass a non-empty string of at most 1024 UTF-8 bytes without U+0000');
    END IF;
    RETURN NEXT __SCHEMA__.produce(produce_batch.stream, it -> 'payload', it ->> 'key', NULL, it -> 'options');
    i := i + 1;
  END LOOP;
END
$fn$;
