-- The OID of an existing role named exactly p_role, or SQL0096.
CREATE OR REPLACE FUNCTION __SCHEMA__.role_oid(p_role TEXT)
RETURNS OID LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_oid OID;
BEGIN
  SELECT r.oid INTO v_oid FROM pg_roles r WHERE r.rolname = p_role;
  IF v_oid IS NULL THEN
    PERFORM __SCHEMA__.raise_coded('SQL0096', format('role %s does not exist', to_jsonb(p_role)),
      'create it first (CREATE ROLE name LOGIN), or pass the exact, case-sensitive name', '42704');
  END IF;
  RETURN v_oid;
END
$fn$;
