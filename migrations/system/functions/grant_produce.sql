-- Lets a role produce to one stream through produce()/produce_batch() (docs/guide/security.md):
--
--   SELECT __SCHEMA__.grant_produce('orders_api', 'orders.placed');
--
-- Records the grant and gives the role USAGE on the schema and EXECUTE on the two functions,
-- nothing else: no privilege on any table. Idempotent. Only the schema's owner may call it.
CREATE OR REPLACE FUNCTION __SCHEMA__.grant_produce(role TEXT, stream TEXT)
RETURNS VOID LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_role OID;
  v_sid BIGINT;
BEGIN
  SELECT t.role_oid, t.stream_id INTO v_role, v_sid FROM __SCHEMA__.produce_grant_target('grant produce', grant_produce.role, grant_produce.stream) t;
  INSERT INTO __SCHEMA__.produce_grant (stream_id, role_oid) VALUES (v_sid, v_role) ON CONFLICT DO NOTHING;
  EXECUTE format('GRANT USAGE ON SCHEMA __SCHEMA__ TO %I', grant_produce.role);
  EXECUTE format('GRANT EXECUTE ON FUNCTION __SCHEMA__.produce(TEXT, JSONB, TEXT, TEXT, JSONB), __SCHEMA__.produce_batch(TEXT, JSONB) TO %I',
    grant_produce.role);
END
$fn$;
