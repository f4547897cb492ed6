-- The messages of (p_low, p_high] a group delivers (docs/protocol/poll-cycle.md#the-byte-bound): every
-- message, except a compacted one that is no longer its key's head (the compaction read filter). The
-- one definition: claim_N measures the range with it, the claim's read and the reclaim read it.
-- LANGUAGE sql, STABLE, one SELECT, not STRICT: the planner inlines it into the calling statement
-- (its arguments must be plain values or columns, not subqueries), which then reads the id index
-- of the range as it would with the filter written out. Its columns are listed rather than the
-- log's row type, which would make the function a dependent of the table (destroy drops the table).
-- search_path: not set, because a function with a SET clause is never inlined. It calls no
-- built-in function; its operators are resolved under the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.deliverable_{{N}}(p_low BIGINT, p_high BIGINT)
RETURNS TABLE (id BIGINT, message_key TEXT, compaction_rank BIGINT, payload JSON, options JSONB,
               created_at TIMESTAMPTZ)
LANGUAGE sql STABLE AS $fn$
  SELECT m.id, m.message_key, m.compaction_rank, m.payload, m.options, m.created_at
    FROM {{schema}}.message_log_{{N}} m
   WHERE m.id > p_low AND m.id <= p_high
     AND (m.compaction_rank IS NULL OR EXISTS (
           SELECT 1 FROM {{schema}}.compaction_head_{{N}} h
            WHERE h.compaction_key = m.message_key AND h.message_id = m.id))
$fn$;
