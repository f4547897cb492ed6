-- Refuses a caller that is not a member of the schema's owner (a superuser is): grant_produce(),
-- revoke_produce() and setup_roles() change who may do what, which is the owner's to decide.
CREATE OR REPLACE FUNCTION __SCHEMA__.owner_only(p_what TEXT)
RETURNS VOID LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_owner NAME;
BEGIN
  SELECT r.rolname INTO v_owner FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.oid = '__SCHEMA__'::regnamespace;
  IF NOT pg_has_role(current_user, v_owner, 'MEMBER') THEN
    PERFORM __SCHEMA__.raise_coded('SQL0095', format('role %s may not %s: only the owner of schema %s (%s) may', current_user, p_what, '__SCHEMA__', v_owner),
      format('connect as %s (the role that runs migrate)', v_owner), '42501');
  END IF;
END
$fn$;
