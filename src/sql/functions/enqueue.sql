-- pgdrain.enqueue(kind, payload, …): the SQL face of enqueue(), so any language, ORM or trigger can
-- enqueue a job in its own transaction. It refuses what enqueue() in TypeScript and the HTTP API
-- refuse, with the same bounds (filled in from src/db/constants.ts; test/enqueue-paths.test.ts runs
-- one table of cases both ways), then enqueues as pgdrain.enqueue_job() does for every way in:
-- inserted, the drainers notified at COMMIT (never for a rollback) when it is due now; the existing
-- job's id when a job with the same dedupe key still exists. What it is not given (max_attempts,
-- priority, and the visibility, keep and version a kind sets) comes from the kind's definition in
-- pgdrain.kinds, which every drainer writes when it starts: the row a typed enqueue writes. Payloads
-- are not checked against the kind's schema here (SQL cannot see it): a drainer that knows the kind
-- sends a payload it rejects to `dead` with the reason in last_error.
CREATE OR REPLACE FUNCTION pgdrain.enqueue(
  kind text,
  payload jsonb,
  run_at timestamptz DEFAULT now(),
  max_attempts integer DEFAULT NULL,
  dedupe_key text DEFAULT NULL,
  priority integer DEFAULT NULL,
  group_key text DEFAULT NULL,
  dedupe_mode text DEFAULT 'keep',
  after bigint[] DEFAULT NULL,
  timeout_ms integer DEFAULT NULL,
  traceparent text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $enqueue$
#variable_conflict use_column
DECLARE
  enqueued record;
BEGIN
  IF enqueue.kind IS NULL OR enqueue.kind !~ '{{KIND_PATTERN}}' THEN
    RAISE EXCEPTION 'pgdrain.enqueue: kind % is not a job kind: {{KIND_PATTERN_MESSAGE}}', coalesce(quote_literal(enqueue.kind), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'pgdrain.enqueue: payload is NULL: pass a jsonb value (''{}'' for none)'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF enqueue.priority IS NOT NULL AND enqueue.priority NOT BETWEEN {{PRIORITY_MIN}} AND {{PRIORITY_MAX}} THEN
    RAISE EXCEPTION 'pgdrain.enqueue: priority is %, it must be between {{PRIORITY_MIN}} and {{PRIORITY_MAX}} (higher runs first)', enqueue.priority
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.max_attempts IS NOT NULL AND enqueue.max_attempts NOT BETWEEN {{MAX_ATTEMPTS_MIN}} AND {{MAX_ATTEMPTS_MAX}} THEN
    RAISE EXCEPTION 'pgdrain.enqueue: max_attempts is %, it must be between {{MAX_ATTEMPTS_MIN}} and {{MAX_ATTEMPTS_MAX}}', enqueue.max_attempts
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_key IS NOT NULL AND length(enqueue.dedupe_key) NOT BETWEEN 1 AND {{MAX_DEDUPE_KEY_LENGTH}} THEN
    RAISE EXCEPTION 'pgdrain.enqueue: dedupe_key is % characters long; use 1 to {{MAX_DEDUPE_KEY_LENGTH}} (or NULL for none)', length(enqueue.dedupe_key)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.group_key IS NOT NULL AND length(enqueue.group_key) NOT BETWEEN 1 AND {{MAX_GROUP_KEY_LENGTH}} THEN
    RAISE EXCEPTION 'pgdrain.enqueue: group_key is % characters long; use 1 to {{MAX_GROUP_KEY_LENGTH}} (or NULL for none)', length(enqueue.group_key)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_mode IS NULL OR enqueue.dedupe_mode NOT IN ('keep', 'replace') THEN
    RAISE EXCEPTION 'pgdrain.enqueue: dedupe_mode is %, use ''keep'' (the existing job stays as it is) or ''replace''', coalesce(quote_literal(enqueue.dedupe_mode), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_mode = 'replace' AND enqueue.dedupe_key IS NULL THEN
    RAISE EXCEPTION 'pgdrain.enqueue: dedupe_mode ''replace'' needs a dedupe_key'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_key IS NOT NULL AND cardinality(enqueue.after) > 0 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: a job that waits for others (after) cannot also have a dedupe_key'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.traceparent IS NOT NULL AND enqueue.traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
    RAISE EXCEPTION 'pgdrain.enqueue: traceparent % is not a W3C trace context: use 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>', quote_literal(enqueue.traceparent)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.timeout_ms IS NOT NULL AND enqueue.timeout_ms NOT BETWEEN {{TIMEOUT_MIN_MS}} AND {{TIMEOUT_MAX_MS}} THEN
    RAISE EXCEPTION 'pgdrain.enqueue: timeout_ms is %, use {{TIMEOUT_MIN_MS}} to {{TIMEOUT_MAX_MS}} milliseconds, or NULL for the kind''s', enqueue.timeout_ms
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  SELECT * INTO enqueued FROM pgdrain.enqueue_job(enqueue.kind, enqueue.payload, enqueue.run_at, enqueue.max_attempts,
    enqueue.dedupe_key, NULL, enqueue.priority, enqueue.group_key, enqueue.timeout_ms, NULL, enqueue.traceparent,
    enqueue.dedupe_mode, enqueue.after, from_kind => true);
  IF enqueued.missing IS NOT NULL THEN
    RAISE EXCEPTION 'pgdrain.enqueue: after names jobs that do not exist: %', enqueued.missing
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN enqueued.id;
END
$enqueue$;
