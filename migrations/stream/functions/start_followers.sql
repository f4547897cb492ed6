-- Start the later rows of one group (start_exceptions_N), in one statement: p_rows is
-- start_exceptions_N's input, whose elements with "lead" = p_lead are the group's later rows.
-- p_lead_ok: the lead started in this call; p_cut: the group's lowest unresolved predecessor
-- outside it (group_pred_N), or NULL. The rows run under the lead's key lease, so they take none. A
-- row starts when it and every row of the group before it may: it is reserved under p_token (or
-- already inflight under it: a repeat of the call, 'started'), its message exists and is not
-- compacted (a compacted one starts alone), and it lies below p_cut. Each starts inflight under
-- p_token until now() + its run_ms. kind as start_exceptions_N: 'started'; 'lost' (not reserved
-- under p_token any more, or its message gone); 'deferred' with reason 'pred' and ref the row it
-- waits for (p_cut when it lies above it, else p_lead: a row before it, or the lead, did not start).
CREATE OR REPLACE FUNCTION {{schema}}.start_followers_{{N}}(
  p_group BIGINT, p_token UUID, p_lead BIGINT, p_lead_ok BOOLEAN, p_cut BIGINT, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
  WITH f AS (
    SELECT j.id, j.run_ms FROM jsonb_to_recordset(p_rows) AS j(id BIGINT, run_ms BIGINT, lead BIGINT)
     WHERE j.lead = p_lead
  ), cur AS (
    -- Each row by primary key, locked in id order.
    SELECT f.id, f.run_ms, e.status, (SELECT m.compaction_rank IS NULL FROM {{schema}}.message_log_{{N}} m WHERE m.id = f.id) AS plain
      FROM (SELECT * FROM f ORDER BY f.id) f
      LEFT JOIN LATERAL (SELECT e.status FROM {{schema}}.exception_queue_{{N}} e
                          WHERE e.consumer_group_id = p_group AND e.message_id = f.id AND e.lease_token = p_token
                            AND e.status IN ('ready', 'deferred', 'inflight')
                          OFFSET 0
                            FOR UPDATE) e ON true
  ), ok AS (
    SELECT c.*, bool_and(COALESCE(p_lead_ok AND c.status IS NOT NULL
                                  AND (c.status = 'inflight' OR (c.plain AND (p_cut IS NULL OR c.id < p_cut))), false))
                  OVER (ORDER BY c.id) AS go
      FROM cur c
  ), upd AS (
    -- Runs to completion whether or not the answer reads it.
    UPDATE {{schema}}.exception_queue_{{N}} e
       SET status = 'inflight', lease_expires_at = now() + o.run_ms * interval '1 millisecond', updated_at = now()
      FROM ok o
     WHERE e.consumer_group_id = p_group AND e.message_id = o.id AND o.go AND o.status <> 'inflight'
    RETURNING e.message_id
  )
  SELECT o.id,
         CASE WHEN o.go THEN 'started' WHEN o.status IS NULL OR o.plain IS NULL THEN 'lost' ELSE 'deferred' END,
         CASE WHEN o.go OR o.status IS NULL OR o.plain IS NULL THEN NULL ELSE 'pred' END,
         CASE WHEN o.go OR o.status IS NULL OR o.plain IS NULL THEN NULL
              WHEN p_cut IS NOT NULL AND p_cut < o.id THEN p_cut ELSE p_lead END
    FROM ok o
   ORDER BY o.id
$fn$;
