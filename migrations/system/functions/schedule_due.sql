-- The due time of SQL produce()'s options.deliverAt (epoch ms) or options.delay (ms after the
-- database's now()), checked as the library checks them (SQL0015); NULL when neither is given
-- (docs/guide/producing.md#scheduled-delivery).
CREATE OR REPLACE FUNCTION __SCHEMA__.schedule_due(p_opts JSONB) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  fix CONSTANT TEXT := 'correct the argument as the message says';
  v JSONB;
BEGIN
  IF p_opts IS NULL OR NOT (p_opts ? 'deliverAt' OR p_opts ? 'delay') THEN
    RETURN NULL;
  END IF;
  IF p_opts ? 'deliverAt' AND p_opts ? 'delay' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', 'options: give deliverAt or delay, not both', fix);
  END IF;
  IF p_opts ? 'deliverAt' THEN
    v := p_opts -> 'deliverAt';
    IF jsonb_typeof(v) <> 'number' OR v::NUMERIC < 0 OR v::NUMERIC > 8640000000000000 THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.deliverAt must be epoch milliseconds (a finite number from 0 to 8.64e15), got %s', v), fix);
    END IF;
    RETURN to_timestamp(v::NUMERIC::FLOAT8 / 1000);
  END IF;
  v := p_opts -> 'delay';
  IF jsonb_typeof(v) <> 'number' OR v::NUMERIC < 0 OR v::NUMERIC > 8640000000000000 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.delay must be a finite number of milliseconds >= 0, got %s', v), fix);
  END IF;
  RETURN now() + v::NUMERIC::FLOAT8 * interval '1 millisecond';
END
$fn$;
