-- Takes up to p_want tokens of a group's bucket (docs/protocol/poll-cycle.md#rate-limit). p_rate is the
-- group's resolved rateLimit, {"perSecond": r, "burst": b}. The bucket row is locked until the
-- caller's transaction ends, so the claim that asked for the tokens commits them or gives them back
-- with its rollback. The clock is now(), the transaction's start: stable across the takes of one
-- transaction, and never later than the moment of the take, so a late lock grants fewer tokens,
-- never more.
--   granted    the tokens taken, min(p_want, available); available counts whole tokens;
--   available  the whole tokens left after the take;
--   wait_ms    when fewer than p_want were granted: ms until the next token (limited counts it);
--              else 0.
-- p_want 0 takes the lock and reads available (callers take it first: the bucket is the first row
-- lock of any transaction that takes tokens, so a transaction waiting for it holds nothing another
-- could wait for).
CREATE OR REPLACE FUNCTION __SCHEMA__.take_tokens(p_group BIGINT, p_want BIGINT, p_rate JSONB)
RETURNS TABLE (granted BIGINT, available BIGINT, wait_ms BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_t FLOAT8 := 1000.0 / (p_rate->>'perSecond')::float8;
  v_burst BIGINT := (p_rate->>'burst')::bigint;
  v_tat TIMESTAMPTZ;
  v_base TIMESTAMPTZ;
  v_debt FLOAT8;
  v_avail BIGINT;
BEGIN
  SELECT r.tat INTO v_tat FROM __SCHEMA__.group_rate r WHERE r.group_id = p_group FOR UPDATE;
  IF NOT FOUND THEN
    -- The group's first take: a full bucket. Two first takes at once meet at the key; the second
    -- waits for the first and then reads (and locks) its row.
    INSERT INTO __SCHEMA__.group_rate (group_id) VALUES (p_group) ON CONFLICT (group_id) DO NOTHING;
    SELECT r.tat INTO v_tat FROM __SCHEMA__.group_rate r WHERE r.group_id = p_group FOR UPDATE;
  END IF;
  v_base := GREATEST(v_tat, now());
  v_debt := extract(epoch FROM v_base - now()) * 1000;
  -- A token short of whole by float rounding alone (1e-9 of a token) counts as whole.
  v_avail := GREATEST(floor(v_burst - v_debt / v_t + 1e-9)::bigint, 0);
  granted := LEAST(p_want, v_avail);
  wait_ms := 0;
  IF granted < p_want THEN
    v_debt := v_debt + granted * v_t;
    wait_ms := GREATEST(ceil(v_debt - (v_burst - 1) * v_t)::bigint, 1);
    UPDATE __SCHEMA__.group_rate
       SET tat = v_base + (granted * v_t) * interval '1 millisecond', limited = limited + 1, limited_at = now()
     WHERE group_id = p_group;
  ELSIF granted > 0 THEN
    UPDATE __SCHEMA__.group_rate SET tat = v_base + (granted * v_t) * interval '1 millisecond' WHERE group_id = p_group;
  END IF;
  available := v_avail - granted;
  RETURN NEXT;
END
$fn$;
