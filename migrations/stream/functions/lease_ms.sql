-- The lease of a batch (docs/protocol/poll-cycle.md#the-range-lease): Tmax × ceil(n / c) + margin, capped at
-- p_cap (NULL: no cap), at least 1 ms. The one definition: claim_N and the exception reservation
-- use it, and the range takeover of a reclaim.
CREATE OR REPLACE FUNCTION {{schema}}.lease_ms_{{N}}(
  p_tmax BIGINT, p_n BIGINT, p_concurrency INTEGER, p_margin BIGINT, p_cap BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT GREATEST(1, LEAST(p_tmax * ceil(p_n::numeric / p_concurrency)::bigint + p_margin,
                           COALESCE(p_cap, 9223372036854775807)))
$fn$;
