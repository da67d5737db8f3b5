-- pgdrain.set_group_limits(…): sets (or, with every limit NULL, removes) the limits of one group key of a kind: `concurrency`
-- overrides the kind's groupConcurrency for that key, `rate_limit` starts per
-- `rate_period_seconds` its per-group rate limit. In effect at the next claim of every drainer.
-- Returns true when limits are set, false when they were removed.
CREATE OR REPLACE FUNCTION pgdrain.set_group_limits(
  kind text,
  group_key text,
  concurrency integer DEFAULT NULL,
  rate_limit integer DEFAULT NULL,
  rate_period_seconds double precision DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $set_group_limits$
BEGIN
  IF set_group_limits.kind IS NULL OR set_group_limits.kind !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
    RAISE EXCEPTION 'pgdrain.set_group_limits: kind must be 1-100 letters, digits, or _ . : -' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF set_group_limits.group_key IS NULL OR length(set_group_limits.group_key) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'pgdrain.set_group_limits: group_key must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF set_group_limits.concurrency IS NOT NULL AND set_group_limits.concurrency NOT BETWEEN 1 AND 100000 THEN
    RAISE EXCEPTION 'pgdrain.set_group_limits: concurrency must be a whole number from 1 to 100000' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF (set_group_limits.rate_limit IS NULL) <> (set_group_limits.rate_period_seconds IS NULL) THEN
    RAISE EXCEPTION 'pgdrain.set_group_limits: rate_limit and rate_period_seconds go together' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF set_group_limits.rate_limit IS NOT NULL AND (set_group_limits.rate_limit NOT BETWEEN 1 AND 1000000
       OR NOT (set_group_limits.rate_period_seconds >= 0.001 AND set_group_limits.rate_period_seconds <= 86400)) THEN
    RAISE EXCEPTION 'pgdrain.set_group_limits: rate_limit must be 1 to 1000000 starts per rate_period_seconds from 0.001 to 86400'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF set_group_limits.concurrency IS NULL AND set_group_limits.rate_limit IS NULL THEN
    DELETE FROM pgdrain.group_limits g WHERE g.kind = set_group_limits.kind AND g.group_key = set_group_limits.group_key;
    RETURN false;
  END IF;
  INSERT INTO pgdrain.group_limits AS g (kind, group_key, concurrency, rate_limit, rate_period_seconds, updated_at)
  VALUES (set_group_limits.kind, set_group_limits.group_key, set_group_limits.concurrency, set_group_limits.rate_limit, set_group_limits.rate_period_seconds, now())
  ON CONFLICT ON CONSTRAINT group_limits_pkey DO UPDATE
    SET concurrency = excluded.concurrency, rate_limit = excluded.rate_limit, rate_period_seconds = excluded.rate_period_seconds, updated_at = now();
  -- Jobs the old limits held back may be claimed now.
  PERFORM pg_notify('{{NOTIFY_CHANNEL}}', set_group_limits.kind);
  RETURN true;
END
$set_group_limits$;
