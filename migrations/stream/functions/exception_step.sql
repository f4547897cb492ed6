-- One round trip of the exception phase: record p_outcomes, then start p_starts (either may be
-- an empty array), in one transaction. Result rows: step 'record' (kind as record_exceptions_N)
-- and step 'start' (kind, reason, ref as start_exceptions_N). Recording first frees the key
-- leases of finished runs before the starts take theirs.
CREATE OR REPLACE FUNCTION {{schema}}.exception_step_{{N}}(
  p_group BIGINT, p_token UUID, p_outcomes JSONB, p_starts JSONB)
RETURNS TABLE (step TEXT, message_id BIGINT, kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF jsonb_array_length(p_outcomes) > 0 THEN
    RETURN QUERY SELECT 'record'::text, r.message_id, r.kind, NULL::text, NULL::bigint
                   FROM {{schema}}.record_exceptions_{{N}}(p_group, p_token, p_outcomes) r;
  END IF;
  IF jsonb_array_length(p_starts) > 0 THEN
    RETURN QUERY SELECT 'start'::text, s.message_id, s.kind, s.reason, s.ref
                   FROM {{schema}}.start_exceptions_{{N}}(p_group, p_token, p_starts) s;
  END IF;
END
$fn$;
