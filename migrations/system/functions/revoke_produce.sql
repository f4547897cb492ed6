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
  SELECT t.role_oid, t.stream_id INTO v_role, v_sid FROM __SCHEMA__.produce_grant_target('revoke produce', revoke_produce.role, revoke_produce.stream) t;
  DELETE FROM __SCHEMA__.produce_grant g WHERE g.stream_id = v_sid AND g.role_oid = v_role;
  IF NOT EXISTS (SELECT 1 FROM __SCHEMA__.produce_grant g WHERE g.role_oid = v_role) THEN
    EXECUTE format('REVOKE EXECUTE ON FUNCTION __SCHEMA__.produce(TEXT, JSONB, TEXT, TEXT, JSONB), __SCHEMA__.produce_batch(TEXT, JSONB) FROM %I',
      revoke_produce.role);
  END IF;
END
$fn$;
