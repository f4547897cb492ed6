-- Checks a key or idempotency key (SQL0018): 1 .. 1024 UTF-8 bytes (text cannot hold U+0000).
CREATE OR REPLACE FUNCTION __SCHEMA__.check_key(p_what TEXT, p_key TEXT) RETURNS VOID
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF p_key = '' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0018', format('%s must be a non-empty string, got ""', p_what), 'pass a non-empty string of at most 1024 UTF-8 bytes without U+0000');
  END IF;
  IF octet_length(p_key) > 1024 THEN
    PERFORM __SCHEMA__.raise_coded('SQL0018', format('%s is %s UTF-8 bytes; the limit is 1024', p_what, octet_length(p_key)), 'pass a non-empty string of at most 1024 UTF-8 bytes without U+0000');
  END IF;
END
$fn$;
