-- pgdrain: online
-- pgdrain.enqueue() refuses what enqueue() in TypeScript and the HTTP API refuse, with the same
-- bounds (src/jobs/job-options.ts, the one options schema; test/enqueue-paths.test.ts runs one
-- table of cases both ways): max_attempts above 100, a dedupe_key longer than 500 characters,
-- dedupe_mode 'replace' without a dedupe_key, and a dedupe_key with `after`. It took them before
-- (the mode was ignored without a key). Online: the function replaced in one statement.
CREATE OR REPLACE FUNCTION pgdrain.enqueue(
  kind text,
  payload jsonb,
  run_at timestamptz DEFAULT now(),
  max_attempts integer DEFAULT 3,
  dedupe_key text DEFAULT NULL,
  priority integer DEFAULT 0,
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
  job_id bigint;
  holder_kind text;
  due timestamptz := coalesce(enqueue.run_at, now());
  waits_for bigint[] := ARRAY(SELECT DISTINCT unnest(enqueue.after));
  found_ids bigint[];
  unfinished integer := 0;
  ended_parent bigint;
  ended_status text;
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
  IF enqueue.max_attempts IS NOT NULL AND enqueue.max_attempts NOT BETWEEN 1 AND 100 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: max_attempts is %, it must be between 1 and 100', enqueue.max_attempts
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_key IS NOT NULL AND length(enqueue.dedupe_key) NOT BETWEEN 1 AND 500 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: dedupe_key is % characters long; use 1 to 500 (or NULL for none)', length(enqueue.dedupe_key)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.group_key IS NOT NULL AND length(enqueue.group_key) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: group_key is % characters long; use 1 to 200 (or NULL for none)', length(enqueue.group_key)
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
  IF enqueue.timeout_ms IS NOT NULL AND enqueue.timeout_ms NOT BETWEEN 100 AND 86400000 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: timeout_ms is %, use 100 (0.1 s) to 86400000 (a day), or NULL for the kind''s', enqueue.timeout_ms
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  -- The jobs it waits for: marked as having dependents (which also locks them, in id order, so none
  -- of them can complete before this job is committed and counted, and two enqueues waiting for the
  -- same jobs cannot deadlock), refused when one does not exist.
  IF cardinality(waits_for) > 0 THEN
    WITH parents AS MATERIALIZED (
      SELECT l.id FROM pgdrain.jobs l WHERE l.id = ANY(waits_for) ORDER BY l.id FOR UPDATE),
    marked AS (
      UPDATE pgdrain.jobs p SET has_dependents = true FROM parents l WHERE p.id = l.id RETURNING p.id, p.status)
    SELECT array_agg(m.id), count(*) FILTER (WHERE m.status <> 'completed'),
           min(m.id) FILTER (WHERE m.status IN ('dead', 'cancelled'))
      INTO found_ids, unfinished, ended_parent FROM marked m;
    IF coalesce(cardinality(found_ids), 0) < cardinality(waits_for) THEN
      RAISE EXCEPTION 'pgdrain.enqueue: after names jobs that do not exist: %', ARRAY(SELECT unnest(waits_for) EXCEPT SELECT unnest(found_ids) ORDER BY 1)
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF ended_parent IS NOT NULL THEN
      SELECT status INTO ended_status FROM pgdrain.jobs WHERE id = ended_parent;
    END IF;
  END IF;

  -- A concurrent enqueue of the same key can commit, or its job be deleted or claimed, between one
  -- statement and the next; each retry takes a fresh snapshot.
  FOR attempt IN 1..5 LOOP
    IF enqueue.dedupe_key IS NOT NULL AND enqueue.dedupe_mode = 'replace' THEN
      UPDATE pgdrain.jobs j SET payload = enqueue.payload, run_at = due
       WHERE j.dedupe_key = enqueue.dedupe_key AND j.kind = enqueue.kind AND j.status = 'pending'
      RETURNING j.id INTO job_id;
      IF job_id IS NOT NULL THEN
        IF due <= now() THEN
          PERFORM pg_notify('pgdrain_jobs', enqueue.kind);
        END IF;
        RETURN job_id;
      END IF;
      UPDATE pgdrain.jobs j SET dedupe_key = NULL
       WHERE j.dedupe_key = enqueue.dedupe_key AND j.kind = enqueue.kind AND j.status IN ('running', 'dead');
    END IF;
    INSERT INTO pgdrain.jobs (kind, payload, run_at, max_attempts, dedupe_key, priority, group_key, timeout_ms, traceparent, status, waiting_for, last_error, finished_at)
    VALUES (enqueue.kind, enqueue.payload, due, coalesce(enqueue.max_attempts, 3), enqueue.dedupe_key, coalesce(enqueue.priority, 0), enqueue.group_key,
            enqueue.timeout_ms, enqueue.traceparent,
            CASE WHEN ended_parent IS NOT NULL THEN 'dead' WHEN unfinished > 0 THEN 'waiting' ELSE 'pending' END,
            CASE WHEN ended_parent IS NULL AND unfinished > 0 THEN unfinished END,
            CASE WHEN ended_parent IS NOT NULL THEN format('job %s it waits for ended %s', ended_parent, ended_status) END,
            CASE WHEN ended_parent IS NOT NULL THEN now() END)
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id INTO job_id;
    IF job_id IS NOT NULL THEN
      IF cardinality(waits_for) > 0 THEN
        INSERT INTO pgdrain.job_dependencies (depends_on, job_id) SELECT unnest(waits_for), job_id;
      END IF;
      IF due <= now() AND ended_parent IS NULL AND unfinished = 0 THEN
        PERFORM pg_notify('pgdrain_jobs', enqueue.kind);
      END IF;
      RETURN job_id;
    END IF;
    SELECT id, j.kind INTO job_id, holder_kind FROM pgdrain.jobs j WHERE j.dedupe_key = enqueue.dedupe_key;
    IF job_id IS NOT NULL AND (enqueue.dedupe_mode = 'keep' OR holder_kind <> enqueue.kind) THEN
      RETURN job_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'pgdrain.enqueue: could not insert or find the job with dedupe key %', quote_literal(enqueue.dedupe_key)
    USING ERRCODE = 'serialization_failure';
END
$enqueue$;
