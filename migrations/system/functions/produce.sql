-- Produce from SQL (docs/guide/producing.md#producing-from-sql):
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
--
-- It runs as the schema's owner (SECURITY DEFINER), so a producer role needs no privilege on any
-- table, only EXECUTE on this function and produce_batch (docs/guide/security.md). Who may produce
-- to a stream: a session whose login role (session_user) is a member of the owner, or of a role
-- granted the stream with grant_produce(). session_user rather than the caller's current role,
-- which a SECURITY DEFINER function cannot see: SET ROLE narrows nothing the session could not
-- RESET, so the login role's memberships are what the session can act as.
--
-- One message. options: {"message": {timeout, concurrency, retry}, "compaction": {"rank": n},
-- "deliverAt": epoch ms | "delay": ms, "expiresAt": epoch ms | "ttl": ms}. Returns the new message's id;
-- for an idempotency key already stored, the first message's id. A message with deliverAt or delay
-- waits in scheduled_message_N (docs/guide/producing.md#scheduled-delivery) and its scheduled id is
-- returned negated (-42 for scheduled id 42), which no log id can be; so is a key's first message
-- while it still waits. expiresAt / ttl are stored in the message's options
-- (docs/guide/producing.md#expiry); a scheduled message's ttl counts from its due time.
-- The payload argument is jsonb (so a bare literal needs no cast; a json overload beside it would make
-- such a call ambiguous), and the log stores it as json: the jsonb's text, keys in jsonb's order and
-- the last of duplicate keys (docs/protocol/data-model.md#payloads). That text is what max_payload_bytes
-- measures.
CREATE OR REPLACE FUNCTION __SCHEMA__.produce(
  stream TEXT, payload JSONB, key TEXT DEFAULT NULL, idempotency_key TEXT DEFAULT NULL, options JSONB DEFAULT NULL)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_stream TEXT := produce.stream;
  v_payload JSONB := produce.payload;
  v_json JSON;
  v_key TEXT := produce.key;
  v_idem TEXT := produce.idempotency_key;
  v_opts JSONB := produce.options;
  v_message JSONB;
  v_expiry JSONB;
  v_rank BIGINT;
  v_uuid UUID;
  v_sid BIGINT;
  v_max INTEGER;
  v_bytes INTEGER;
  v_id BIGINT;
  v_next BIGINT;
  v_size BIGINT;
  v_found BOOLEAN;
  v_due TIMESTAMPTZ;
  k TEXT;
BEGIN
  -- Arguments, in the library's order (docs/guide/producing.md#validation).
  IF v_opts IS NOT NULL AND jsonb_typeof(v_opts) = 'null' THEN v_opts := NULL; END IF;
  IF v_opts IS NOT NULL THEN
    IF jsonb_typeof(v_opts) <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', 'options must be an object', 'correct the argument as the message says');
    END IF;
    FOR k IN SELECT jsonb_object_keys(v_opts) LOOP
      IF k NOT IN ('message', 'compaction', 'deliverAt', 'delay', 'expiresAt', 'ttl') THEN
        PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.%s: unknown key; allowed: message, compaction, deliverAt, delay, expiresAt, ttl (key and idempotency_key are arguments)', k),
          'correct the argument as the message says');
      END IF;
    END LOOP;
  END IF;
  IF v_payload IS NULL THEN
    PERFORM __SCHEMA__.raise_coded('SQL0016', 'payload cannot be stored as JSON: the payload is SQL NULL (use ''null''::jsonb for a JSON null) at payload',
      'convert the value at the named path to plain JSON');
  END IF;
  -- The library's nesting limit: no object or array at depth 1000 (the payload itself is depth 0),
  -- which takes at least 2,002 bytes of JSON text to reach.
  v_json := v_payload::JSON;
  v_bytes := octet_length(v_json::TEXT);
  IF v_bytes > 2000 AND jsonb_path_exists(v_payload, 'strict $.**{1000} ? (@.type() == "object" || @.type() == "array")') THEN
    PERFORM __SCHEMA__.raise_coded('SQL0016', 'payload cannot be stored as JSON: nesting is deeper than 1000 levels (flatten the structure) at payload',
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
  v_due := __SCHEMA__.schedule_due(v_opts);
  v_expiry := __SCHEMA__.check_expiry(v_opts);
  IF v_due IS NOT NULL AND v_opts ? 'expiresAt' AND (v_opts ->> 'expiresAt')::NUMERIC <= EXTRACT(EPOCH FROM v_due) * 1000 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', 'options.expiresAt is not after the message''s due time: it could never be delivered',
      'give an expiresAt after deliverAt / the delay, or use ttl (counted from the due time)');
  END IF;

  SELECT s.id, s.max_payload_bytes, s.partition_size INTO v_sid, v_max, v_size FROM __SCHEMA__.stream_config s WHERE s.name = v_stream;
  v_found := FOUND;
  -- Authorization before the stream's existence is told: a producer learns nothing of streams it
  -- was not granted. current_user is the function's owner here.
  IF NOT pg_has_role(session_user, current_user, 'MEMBER') AND NOT EXISTS (
      SELECT 1 FROM __SCHEMA__.produce_grant g JOIN pg_roles r ON r.oid = g.role_oid
       WHERE g.stream_id = v_sid AND pg_has_role(session_user, r.oid, 'MEMBER')) THEN
    PERFORM __SCHEMA__.raise_coded('SQL0095', format('role %s may not produce to stream %s', session_user, to_jsonb(v_stream)),
      format('the schema owner runs SELECT %s.grant_produce(%L, %L) (or `sqlstreams grant-produce %s %s`)',
        '__SCHEMA__', session_user, v_stream, session_user, v_stream), '42501');
  END IF;
  IF NOT v_found THEN
    PERFORM __SCHEMA__.raise_coded('SQL0009', format('stream %s is not registered', to_jsonb(v_stream)), 'call stream.register() first', '42704');
  END IF;
  IF v_bytes > v_max THEN
    PERFORM __SCHEMA__.raise_coded('SQL0017', format('payload is %s bytes of JSON; stream %s accepts at most %s', v_bytes, v_stream, v_max),
      'store large data elsewhere and send a reference, or raise maxPayloadBytes');
  END IF;

  IF v_expiry IS NOT NULL THEN v_message := COALESCE(v_message, '{}'::JSONB) || v_expiry; END IF;
  IF v_due IS NOT NULL THEN
    -- Parked until its due time; its idempotency key, if any, holds the scheduled id negated.
    IF v_uuid IS NOT NULL THEN
      EXECUTE format('INSERT INTO __SCHEMA__.idempotency_key_%s (idempotency_key, message_id)
                      VALUES ($1, -nextval(''__SCHEMA__.scheduled_message_%s_id_seq''))
                      ON CONFLICT (idempotency_key) DO NOTHING RETURNING message_id', v_sid, v_sid)
        INTO v_id USING v_uuid;
      IF v_id IS NULL THEN
        EXECUTE format('SELECT message_id FROM __SCHEMA__.idempotency_key_%s WHERE idempotency_key = $1', v_sid) INTO v_id USING v_uuid;
        RETURN v_id;
      END IF;
      EXECUTE format('INSERT INTO __SCHEMA__.scheduled_message_%s (id, message_key, compaction_rank, payload, options, idempotency_key, due_at)
                      VALUES ($1, $2, $3, $4, $5, $6, $7)', v_sid)
        USING -v_id, v_key, v_rank, v_json, v_message, v_uuid, v_due;
      RETURN v_id;
    END IF;
    EXECUTE format('INSERT INTO __SCHEMA__.scheduled_message_%s (message_key, compaction_rank, payload, options, due_at)
                    VALUES ($1, $2, $3, $4, $5) RETURNING id', v_sid)
      INTO v_id USING v_key, v_rank, v_json, v_message, v_due;
    RETURN -v_id;
  END IF;

  -- The transaction id before the message id (docs/guide/producing.md#the-xid-before-id-rule).
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
      USING v_id, v_key, v_rank, v_json, v_message;
  ELSE
    EXECUTE format('INSERT INTO __SCHEMA__.message_log_%s (message_key, compaction_rank, payload, options)
                    VALUES ($1, $2, $3, $4) RETURNING id', v_sid)
      INTO v_id USING v_key, v_rank, v_json, v_message;
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
