-- The scheduled-message mover (docs/protocol/data-model.md#scheduled-messages): appends up to p_limit
-- rows of scheduled_message_N that are due (due_at <= now(), the database clock) to message_log_N
-- in due order (due_at, then scheduled id), and deletes them, in the caller's one transaction: a
-- crash before the commit leaves every row where it was, a commit has moved each exactly once.
-- Rows another mover holds are skipped (SKIP LOCKED), so concurrent pollers never move one twice.
-- The transaction id is taken before the first log id (the fence's rule, as a produce does). The
-- compaction head is upserted as a produce would at this moment, and an idempotency key that
-- pointed at the scheduled row (message_id = -scheduled id) is pointed at the new log id, its TTL
-- restarted. At most as many rows as fit in the partition of the next log id are moved; returns
-- how many were moved, or -1 when that partition is missing (maintain() or a producer creates it).
CREATE OR REPLACE FUNCTION {{schema}}.move_scheduled_{{N}}(p_limit INTEGER) RETURNS INTEGER
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_next BIGINT;
  v_size BIGINT := {{partition_size}};
  v_room BIGINT;
  v_id BIGINT;
  v_moved INTEGER := 0;
  r RECORD;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {{schema}}.scheduled_message_{{N}} s WHERE s.due_at <= now()) THEN
    RETURN 0;
  END IF;
  PERFORM pg_current_xact_id();
  SELECT CASE WHEN q.is_called THEN q.last_value + 1 ELSE q.last_value END INTO v_next
    FROM {{schema}}.message_log_{{N}}_id_seq q;
  IF to_regclass(format('%s.%I', '{{schema}}', 'message_log_{{N}}_' || (v_next / v_size)::TEXT)) IS NULL THEN
    RETURN -1;
  END IF;
  v_room := (v_next / v_size + 1) * v_size - v_next;
  FOR r IN
    SELECT s.* FROM {{schema}}.scheduled_message_{{N}} s
     WHERE s.due_at <= now()
     ORDER BY s.due_at, s.id
     LIMIT LEAST(p_limit, v_room)
       FOR UPDATE SKIP LOCKED
  LOOP
    DELETE FROM {{schema}}.scheduled_message_{{N}} s WHERE s.id = r.id;
    INSERT INTO {{schema}}.message_log_{{N}} (message_key, compaction_rank, payload, options)
      VALUES (r.message_key, r.compaction_rank, r.payload, r.options)
      RETURNING id INTO v_id;
    IF r.compaction_rank IS NOT NULL THEN
      INSERT INTO {{schema}}.compaction_head_{{N}} AS h (compaction_key, message_id, compaction_rank, schema_version)
        VALUES (r.message_key, v_id, r.compaction_rank, 1)
        ON CONFLICT (compaction_key) DO UPDATE
           SET message_id = EXCLUDED.message_id, compaction_rank = EXCLUDED.compaction_rank,
               schema_version = 1, updated_at = now()
         WHERE h.message_id IS NULL
            OR (h.compaction_rank, h.message_id) < (EXCLUDED.compaction_rank, EXCLUDED.message_id);
    END IF;
    IF r.idempotency_key IS NOT NULL THEN
      UPDATE {{schema}}.idempotency_key_{{N}} k SET message_id = v_id, created_at = now()
       WHERE k.idempotency_key = r.idempotency_key AND k.message_id = -r.id;
    END IF;
    v_moved := v_moved + 1;
  END LOOP;
  RETURN v_moved;
END
$fn$;
