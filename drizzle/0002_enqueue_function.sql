-- pgdrain.enqueue(): the SQL face of enqueue(), so any language, ORM or trigger can enqueue a job
-- in its own transaction. It inserts the job, notifies the drainers at COMMIT (never for a
-- rollback) when the job is due now, and returns the job's id: the existing job's id when a job
-- with the same dedupe key still exists. Payloads are not checked against the kind's schema here
-- (SQL cannot see it): a drainer that knows the kind sends a payload it rejects to `dead` with the
-- reason in last_error. `priority` (higher runs first) is a column added by 0003: PL/pgSQL
-- resolves the columns it names when it is called, and every migration has run by then.
CREATE OR REPLACE FUNCTION pgdrain.enqueue(
  kind text,
  payload jsonb,
  run_at timestamptz DEFAULT now(),
  max_attempts integer DEFAULT 3,
  dedupe_key text DEFAULT NULL,
  priority integer DEFAULT 0
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $enqueue$
#variable_conflict use_column
DECLARE
  job_id bigint;
  due timestamptz := coalesce(enqueue.run_at, now());
BEGIN
  IF enqueue.kind IS NULL OR enqueue.kind !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
    RAISE EXCEPTION 'pgdrain.enqueue: kind % is not a job kind: use 1-100 letters, digits, or _ . : -', coalesce(quote_literal(enqueue.kind), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'pgdrain.enqueue: payload is NULL: pass a jsonb value (''{}'' for none)'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF enqueue.priority IS NOT NULL AND enqueue.priority NOT BETWEEN -1000 AND 1000 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: priority is %, it must be between -1000 and 1000 (higher runs first)', enqueue.priority
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.max_attempts IS NOT NULL AND enqueue.max_attempts < 1 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: max_attempts is %, it must be at least 1', enqueue.max_attempts
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  -- A concurrent enqueue of the same key can commit, or its job be deleted, between the INSERT's
  -- conflict check and the SELECT; each retry takes a fresh snapshot.
  FOR attempt IN 1..5 LOOP
    INSERT INTO pgdrain.jobs (kind, payload, run_at, max_attempts, dedupe_key, priority)
    VALUES (enqueue.kind, enqueue.payload, due, coalesce(enqueue.max_attempts, 3), enqueue.dedupe_key, coalesce(enqueue.priority, 0))
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id INTO job_id;
    IF job_id IS NOT NULL THEN
      IF due <= now() THEN
        PERFORM pg_notify('pgdrain_jobs', enqueue.kind);
      END IF;
      RETURN job_id;
    END IF;
    SELECT id INTO job_id FROM pgdrain.jobs WHERE dedupe_key = enqueue.dedupe_key;
    IF job_id IS NOT NULL THEN
      RETURN job_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'pgdrain.enqueue: could not insert or find the job with dedupe key %', quote_literal(enqueue.dedupe_key)
    USING ERRCODE = 'serialization_failure';
END
$enqueue$;
