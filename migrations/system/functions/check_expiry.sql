-- Checks a produce's expiresAt / ttl (SQL0015) exactly as the library's prepare() does
-- (docs/guide/producing.md#expiry) and returns what the message stores of them: {"expiresAt": epoch ms}
-- or {"ttl": ms}, or NULL for neither. expiresAt is a number of epoch milliseconds; ttl is
-- milliseconds after the message's created_at (the database's now() at the insert).
CREATE OR REPLACE FUNCTION __SCHEMA__.check_expiry(p_opts JSONB) RETURNS JSONB
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  fix CONSTANT TEXT := 'correct the argument as the message says';
BEGIN
  IF p_opts IS NULL OR NOT (p_opts ? 'expiresAt' OR p_opts ? 'ttl') THEN RETURN NULL; END IF;
  IF p_opts ? 'expiresAt' AND p_opts ? 'ttl' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', 'options: expiresAt and ttl cannot both be set; pass one of them', fix);
  END IF;
  IF p_opts ? 'ttl' THEN
    IF jsonb_typeof(p_opts -> 'ttl') <> 'number' OR (p_opts ->> 'ttl')::NUMERIC <= 0 OR (p_opts ->> 'ttl')::NUMERIC > 9007199254740991 THEN
      PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.ttl must be a number of milliseconds > 0, got %s', p_opts -> 'ttl'), fix);
    END IF;
    RETURN jsonb_build_object('ttl', p_opts -> 'ttl');
  END IF;
  IF jsonb_typeof(p_opts -> 'expiresAt') <> 'number' OR abs((p_opts ->> 'expiresAt')::NUMERIC) > 8640000000000000 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0015', format('options.expiresAt must be epoch milliseconds (a number), got %s', p_opts -> 'expiresAt'), fix);
  END IF;
  RETURN jsonb_build_object('expiresAt', p_opts -> 'expiresAt');
END
$fn$;
