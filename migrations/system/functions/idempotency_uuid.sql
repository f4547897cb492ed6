-- The UUID stored for an idempotency key: verbatim (lower-cased) when it is one, else version 5
-- in the library's namespace a7b11702-1bce-48fd-bb62-d476e1c647ce.
CREATE OR REPLACE FUNCTION __SCHEMA__.idempotency_uuid(p_key TEXT) RETURNS UUID
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
