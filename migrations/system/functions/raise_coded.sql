-- Raises a coded error the way the library words it: "<code> <what> (fix: <how>)".
CREATE OR REPLACE FUNCTION __SCHEMA__.raise_coded(p_code TEXT, p_message TEXT, p_fix TEXT, p_state TEXT DEFAULT '22023')
RETURNS VOID LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  RAISE EXCEPTION '% % (fix: %)', p_code, p_message, p_fix USING ERRCODE = p_state, HINT = p_fix;
END
$fn$;
