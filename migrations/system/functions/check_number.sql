-- A number in a jsonb document checked against a range, as the library's option checks do.
CREATE OR REPLACE FUNCTION __SCHEMA__.check_number(p_code TEXT, p_path TEXT, p_value JSONB, p_min NUMERIC, p_max NUMERIC, p_integer BOOLEAN)
RETURNS VOID LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
