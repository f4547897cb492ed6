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
  PERFORM __SCHEMA__.owner_only('grant produce');
  v_role := __SCHEMA__.role_oid(grant_produce.role);
  -- Rows of dropped roles go, before an OID is reused by a new role.
  DELETE FROM __SCHEMA__.produce_grant g WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.role_oid);
  SELECT s.id INTO v_sid FROM __SCHEMA__.stream_config s WHERE s.name = grant_produce.stream;
  IF NOT FOUND THEN
    PERFORM __SCHEMA__.raise_coded('SQL0009', format('stream %s is not registered', to_jsonb(grant_produce.stream)), 'call stream.register() first', '42704');
  END IF;
  INSERT INTO __SCHEMA__.produce_grant (stream_id, role_oid) VALUES (v_sid, v_role) ON CONFLICT DO NOTHING;
  EXECUTE format('GRANT USAGE ON SCHEMA __SCHEMA__ TO %I', grant_produce.role);
  EXECUTE format('GRANT EXECUTE ON FUNCTION __SCHEMA__.produce(TEXT, JSONB, TEXT, TEXT, JSONB), __SCHEMA__.produce_batch(TEXT, JSONB) TO %I',
    grant_produce.role);
END
$fn$;
