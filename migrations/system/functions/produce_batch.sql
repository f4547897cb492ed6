-- A batch: items is a JSON array of at most 1000 {"payload": ..., "key"?: text, "options"?: {...}}
-- (no idempotency keys, as in produceBatch). All or nothing with the caller's transaction; one id
-- per item, ascending in item order. Runs as the schema's owner, as produce() does, which
-- authorizes each item's stream.
CREATE OR REPLACE FUNCTION __SCHEMA__.produce_batch(stream TEXT, items JSONB)
RETURNS SETOF BIGINT
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
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
