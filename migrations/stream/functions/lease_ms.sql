-- The lease of a batch (docs/protocol/poll-cycle.md#the-range-lease): Tmax × ceil(n / c) + margin, capped at
-- p_cap (NULL: no cap), at least 1 ms. The one definition: claim_N and the exception reservation
-- use it, and the range takeover of a reclaim; a run's lease is the lease of a batch of one
-- (reserve_exceptions_N).
-- LANGUAGE sql, IMMUTABLE, one expression, not STRICT: the planner inlines it into the calling
-- statement, so a call per started row costs no function call.
-- search_path: not set, because a function with a SET clause is never inlined. Its built-in
-- functions are qualified with pg_catalog instead; its operators and casts are resolved under the
-- caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.lease_ms_{{N}}(
  p_tmax BIGINT, p_n BIGINT, p_concurrency INTEGER, p_margin BIGINT, p_cap BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT GREATEST(1, LEAST(p_tmax * pg_catalog.ceil(p_n::numeric / p_concurrency)::bigint + p_margin,
                           COALESCE(p_cap, 9223372036854775807)))
$fn$;
