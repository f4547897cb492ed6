-- Takes a free concurrency slot of a group (docs/guide/configuration.md#maxconcurrency): the lowest of
-- slots 1..p_max that no live lease holds, leased to p_token for p_lease_ms. NULL when every slot
-- is held: the poll is capped, and group_flow counts it. SKIP LOCKED: two takers never wait on
-- each other and never take the same slot (a slot taken meanwhile fails the re-check of expires_at).
CREATE OR REPLACE FUNCTION __SCHEMA__.take_slot(p_group_id BIGINT, p_max INTEGER, p_token UUID, p_lease_ms BIGINT)
RETURNS INTEGER LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_slot INTEGER;
BEGIN
  -- A repeat of a take whose reply was lost finds the slot its token already holds.
  SELECT g.slot INTO v_slot FROM __SCHEMA__.group_slot g
   WHERE g.group_id = p_group_id AND g.token = p_token AND g.expires_at > clock_timestamp();
  IF v_slot IS NOT NULL THEN
    RETURN v_slot;
  END IF;
  INSERT INTO __SCHEMA__.group_slot (group_id, slot)
  SELECT p_group_id, s FROM generate_series(1, p_max) s
  ON CONFLICT (group_id, slot) DO NOTHING;
  SELECT g.slot INTO v_slot FROM __SCHEMA__.group_slot g
   WHERE g.group_id = p_group_id AND g.slot <= p_max AND g.expires_at <= clock_timestamp()
   ORDER BY g.slot LIMIT 1
   FOR UPDATE SKIP LOCKED;
  IF v_slot IS NULL THEN
    INSERT INTO __SCHEMA__.group_flow AS f (group_id, capped, capped_at) VALUES (p_group_id, 1, clock_timestamp())
    ON CONFLICT (group_id) DO UPDATE SET capped = f.capped + 1, capped_at = clock_timestamp();
    RETURN NULL;
  END IF;
  UPDATE __SCHEMA__.group_slot
     SET token = p_token, taken_at = clock_timestamp(), expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
   WHERE group_id = p_group_id AND slot = v_slot;
  RETURN v_slot;
END
$fn$;
