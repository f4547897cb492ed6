-- The backends (other than the caller) whose open transaction holds RowExclusiveLock on this
-- stream's log or one of its partitions, oldest transaction first. pid is NULL for a prepared
-- transaction. Of the backend's statement only its first word (SELECT, INSERT, COMMIT, …): the
-- text of another session's SQL can carry secrets in its literals, and this answer is logged.
CREATE OR REPLACE FUNCTION {{schema}}.fence_holders_{{N}}()
RETURNS TABLE (pid INTEGER, xact_age_ms FLOAT8, application_name TEXT, statement TEXT)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT l.pid, date_part('epoch', clock_timestamp() - a.xact_start) * 1000,
         a.application_name, upper(substring(a.query FROM '^\s*([A-Za-z]{1,20})'))
    FROM pg_catalog.pg_locks l
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' AND l.granted
     AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
     AND l.relation IN (SELECT t.relid FROM pg_catalog.pg_partition_tree('{{schema}}.message_log_{{N}}'::regclass) t)
     AND l.pid IS DISTINCT FROM pg_backend_pid()
   ORDER BY a.xact_start NULLS FIRST
$fn$;
