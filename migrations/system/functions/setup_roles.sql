-- Least-privilege roles for a deployment (docs/guide/security.md), run by the schema's owner:
--
--   SELECT __SCHEMA__.setup_roles(worker => 'sqlstreams_worker', reader => 'sqlstreams_reader');
--
-- Either may be NULL (skipped). A role that does not exist is created with LOGIN (and no
-- password: set one, or use IAM database authentication). Idempotent; run it again after a
-- migration and nothing changes.
--   worker: pollers. USAGE on the schema; SELECT/INSERT/UPDATE/DELETE on its tables (not on
--     produce_grant: it cannot authorize producers), USAGE/SELECT/UPDATE on its sequences, EXECUTE
--     on its functions. No CREATE on the schema: partitions are DDL, so maintain() runs as the owner.
--   reader: the dashboard. USAGE; SELECT on tables and sequences; EXECUTE on functions (the
--     read-only ones are all it can use without a write privilege); default_transaction_read_only.
-- Tables, sequences and functions that the owner creates later (register() of a new stream, a
-- migration) are covered by the owner's default privileges in this schema. Producer roles are
-- granted per stream with grant_produce().
CREATE OR REPLACE FUNCTION __SCHEMA__.setup_roles(worker TEXT DEFAULT NULL, reader TEXT DEFAULT NULL)
RETURNS VOID LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_owner NAME;
  v_role TEXT;
BEGIN
  PERFORM __SCHEMA__.owner_only('set up roles');
  SELECT r.rolname INTO v_owner FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.oid = '__SCHEMA__'::regnamespace;
  FOREACH v_role IN ARRAY ARRAY[setup_roles.worker, setup_roles.reader] LOOP
    IF v_role IS NULL THEN CONTINUE; END IF;
    IF v_role = '' OR v_role = v_owner THEN
      PERFORM __SCHEMA__.raise_coded('SQL0096', format('role %s cannot be a worker or reader role', to_jsonb(v_role)),
        'name a role other than the schema owner', '22023');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = v_role) THEN
      EXECUTE format('CREATE ROLE %I LOGIN', v_role);
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA __SCHEMA__ TO %I', v_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA __SCHEMA__ TO %I', v_role);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA __SCHEMA__ GRANT EXECUTE ON FUNCTIONS TO %I', v_owner, v_role);
  END LOOP;
  IF setup_roles.worker IS NOT NULL THEN
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA __SCHEMA__ TO %I', setup_roles.worker);
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE ON __SCHEMA__.produce_grant FROM %I', setup_roles.worker);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA __SCHEMA__ TO %I', setup_roles.worker);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA __SCHEMA__ GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I', v_owner, setup_roles.worker);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA __SCHEMA__ GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO %I', v_owner, setup_roles.worker);
  END IF;
  IF setup_roles.reader IS NOT NULL THEN
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA __SCHEMA__ TO %I', setup_roles.reader);
    EXECUTE format('GRANT SELECT ON ALL SEQUENCES IN SCHEMA __SCHEMA__ TO %I', setup_roles.reader);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA __SCHEMA__ GRANT SELECT ON TABLES TO %I', v_owner, setup_roles.reader);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA __SCHEMA__ GRANT SELECT ON SEQUENCES TO %I', v_owner, setup_roles.reader);
    EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', setup_roles.reader);
  END IF;
END
$fn$;
