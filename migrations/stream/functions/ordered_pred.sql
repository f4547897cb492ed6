-- The predecessor rule for one (key, id) pair (ordered_preds_N's one-pair case): the lowest
-- unresolved predecessor, or NULL. The exception reservation calls it per candidate row.
-- plpgsql, so its one statement, with ordered_preds_N inlined into it, is planned once per session
-- and not at every call.
-- search_path: not set, because it runs once per candidate row and a SET clause costs a
-- search_path change and restore per call. Its built-in functions are qualified with pg_catalog
-- instead; its only caller, reserve_exceptions_N, runs with search_path = pg_catalog, pg_temp.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_pred_{{N}}(
  p_group BIGINT, p_key TEXT, p_message_id BIGINT, p_own_low BIGINT, p_own_high BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (SELECT p.pred_id FROM {{schema}}.ordered_preds_{{N}}(
            p_group, p_own_low, p_own_high,
            pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('k', p_key, 'id', p_message_id))) p);
END
$fn$;
