-- Checks message options (SQL0013, SQL0014) exactly as validateMessageOptions does.
CREATE OR REPLACE FUNCTION __SCHEMA__.check_message_options(p_message JSONB) RETURNS VOID
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  fix CONSTANT TEXT := 'use the documented ranges of the group configuration';
  k TEXT;
  r JSONB;
BEGIN
  IF jsonb_typeof(p_message) <> 'object' THEN
    PERFORM __SCHEMA__.raise_coded('SQL0013', format('message = %s: must be an object', p_message), fix);
  END IF;
  FOR k IN SELECT jsonb_object_keys(p_message) LOOP
    IF k NOT IN ('timeout', 'concurrency', 'retry') THEN
      PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.%s = %s: unknown key; allowed keys: timeout, concurrency, retry', k, p_message -> k), fix);
    END IF;
  END LOOP;
  IF p_message ? 'timeout' THEN
    PERFORM __SCHEMA__.check_number('SQL0013', 'message.timeout', p_message -> 'timeout', 1, 86400000, true);
  END IF;
  IF p_message ? 'concurrency' AND (jsonb_typeof(p_message -> 'concurrency') <> 'string'
      OR p_message ->> 'concurrency' NOT IN ('parallel', 'exclusive', 'ordered')) THEN
    PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.concurrency = %s: must be one of parallel, exclusive, ordered', p_message -> 'concurrency'), fix);
  END IF;
  IF p_message ? 'retry' THEN
    r := p_message -> 'retry';
    IF jsonb_typeof(r) <> 'object' THEN
      PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.retry = %s: must be an object', r), fix);
    END IF;
    FOR k IN SELECT jsonb_object_keys(r) LOOP
      IF k NOT IN ('maxRetries', 'maxDelays', 'baseDelay', 'maxDelay', 'exponent') THEN
        PERFORM __SCHEMA__.raise_coded('SQL0013', format('message.retry.%s = %s: unknown key; allowed keys: maxRetries, maxDelays, baseDelay, maxDelay, exponent', k, r -> k), fix);
      END IF;
    END LOOP;
    IF r ? 'maxRetries' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxRetries', r -> 'maxRetries', 0, 1000, true); END IF;
    IF r ? 'maxDelays' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxDelays', r -> 'maxDelays', 0, 1000000, true); END IF;
    IF r ? 'baseDelay' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.baseDelay', r -> 'baseDelay', 1, 86400000, true); END IF;
    IF r ? 'maxDelay' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.maxDelay', r -> 'maxDelay', 1, 604800000, true); END IF;
    IF r ? 'exponent' THEN PERFORM __SCHEMA__.check_number('SQL0013', 'message.retry.exponent', r -> 'exponent', 1, 10, false); END IF;
    IF r ? 'baseDelay' AND r ? 'maxDelay' AND (r ->> 'maxDelay')::NUMERIC < (r ->> 'baseDelay')::NUMERIC THEN
      PERFORM __SCHEMA__.raise_coded('SQL0014', format('message.retry.maxDelay = %s: must be >= retry.baseDelay (%s)', r -> 'maxDelay', r -> 'baseDelay'),
        'make messageMin <= message <= messageMax, maxDelay >= baseDelay, and keep concurrency out of messageMin/messageMax');
    END IF;
  END IF;
END
$fn$;
