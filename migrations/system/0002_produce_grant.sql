-- Which roles may produce through the SQL functions produce()/produce_batch(), per stream
-- (docs/guide/security.md). Written only by grant_produce()/revoke_produce(), which only the schema's
-- owner may call; read inside produce(), which runs as the owner. A role is kept by OID so that a
-- rename keeps its grants; a dropped role's rows match no session and are ignored.
CREATE TABLE IF NOT EXISTS __SCHEMA__.produce_grant (
  stream_id  BIGINT NOT NULL REFERENCES __SCHEMA__.stream_config (id) ON DELETE CASCADE,
  role_oid   OID NOT NULL,
  granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_id, role_oid)
);
