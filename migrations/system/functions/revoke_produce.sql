-- Withdraws grant_produce(role, stream). When the role keeps no stream, its EXECUTE on
-- produce()/produce_batch() goes too. Idempotent. Only the schema's owner may call it.
CREATE OR REPLACE FUNCTION __SCHEMA__.revoke_produce(role TEXT, stream TEXT)
RETURNS VOID LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_role OID;
  v_sid BIGINT;
BEGIN
  PERFORM __SCHEMA__.owner_only('revoke produce');
  v_role := __SCHEMA__.role_oid(revoke_produce.role);
  -- Rows of dropped roles go, before an OID is reused by a new role.
  DELETE FROM __SCHEMA__.produce_grant g WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.role_oid);
  SELECT s.id INTO v_sid FROM __SCHEMA__.stream_config s WHERE s.name = revoke_produce.stream;
  IF NOT FOUND THEN
    PERFORM __SCHEMA__.raise_coded('SQL0009', format('stream %s is not registered', to_jsonb(revoke_produce.stream)), 'call stream.register() first', '42704');
  END IF;
  DELETE FROM __SCHEMA__.produce_grant g WHERE g.stream_id = v_sid AND g.role_oid = v_role;
  IF NOT EXISTS (SELECT 1 FROM __SCHEMA__.produce_grant g WHERE g.role_oid = v_role) THEN
    EXECUTE format('REVOKE EXECUTE ON FUNCTION __SCHEMA__.produce(TEXT, JSONB, TEXT, TEXT, JSONB), __SCHEMA__.produce_batch(TEXT, JSONB) FROM %I',
      revoke_produce.role);
  END IF;
END
$fn$;
