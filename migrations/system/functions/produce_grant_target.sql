-- What grant_produce() and revoke_produce() both check first: the caller owns the schema, the role
-- exists, the stream is registered. Grants of dropped roles are deleted on the way, before an OID
-- is reused by a new role. Returns the role's OID and the stream's id.
CREATE OR REPLACE FUNCTION __SCHEMA__.produce_grant_target(p_what TEXT, p_role TEXT, p_stream TEXT, OUT role_oid OID, OUT stream_id BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  PERFORM __SCHEMA__.owner_only(p_what);
  role_oid := __SCHEMA__.role_oid(p_role);
  DELETE FROM __SCHEMA__.produce_grant g WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.role_oid);
  SELECT s.id INTO stream_id FROM __SCHEMA__.stream_config s WHERE s.name = p_stream;
  IF NOT FOUND THEN
    PERFORM __SCHEMA__.raise_coded('SQL0009', format('stream %s is not registered', to_jsonb(p_stream)), 'call stream.register() first', '42704');
  END IF;
END
$fn$;
