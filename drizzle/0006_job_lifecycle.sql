-- pgdrain: online
-- A job's whole life: kept results and terminal states (completed, cancelled), progress, a cancel
-- that reaches a running handler, waiting for other jobs (`after`), a timeout per job. Online:
-- every column is nullable without a default (catalog only); the status CHECK is replaced NOT VALID
-- then validated (no scan under lock; between the two, the old values are all still allowed by
-- the new check); indexes are built CONCURRENTLY; the functions are replaced in one statement.
CREATE TABLE IF NOT EXISTS "pgdrain"."finished_jobs" (
	"id" bigint PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"status" text NOT NULL,
	"finished_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."job_dependencies" (
	"depends_on" bigint NOT NULL,
	"job_id" bigint NOT NULL,
	CONSTRAINT "job_dependencies_pkey" PRIMARY KEY("depends_on","job_id")
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_dependencies_job" ON "pgdrain"."job_dependencies" USING btree ("job_id");
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs"
  ADD COLUMN IF NOT EXISTS "timeout_ms" integer,
  ADD COLUMN IF NOT EXISTS "keep_seconds" integer,
  ADD COLUMN IF NOT EXISTS "keep_until" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "finished_at" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "result" jsonb,
  ADD COLUMN IF NOT EXISTS "progress" jsonb,
  ADD COLUMN IF NOT EXISTS "cancel_requested_at" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "watched_until" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "waiting_for" integer,
  ADD COLUMN IF NOT EXISTS "has_dependents" boolean;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" DROP CONSTRAINT IF EXISTS "jobs_status_valid", ADD CONSTRAINT "jobs_status_valid" CHECK (status IN ('pending', 'running', 'dead', 'completed', 'cancelled', 'waiting')) NOT VALID;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" VALIDATE CONSTRAINT "jobs_status_valid";
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_kept" ON "pgdrain"."jobs" USING btree ("keep_until") WHERE status IN ('completed', 'cancelled');
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_finished" ON "pgdrain"."jobs" USING btree ("id") WHERE status IN ('completed', 'cancelled');
--> statement-breakpoint
-- pgdrain.enqueue() gains `after` (ids of jobs this one waits for: it is claimed once every one of
-- them has completed, and is dead at once when one of them ended dead or cancelled; unknown ids are
-- refused) and `timeout_ms` (the handler's timeout for this job, 100 ms to 24 h; NULL: the kind's).
DROP FUNCTION IF EXISTS pgdrain.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text);
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
  timeout_ms integer DEFAULT NULL
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
  IF enqueue.max_attempts IS NOT NULL AND enqueue.max_attempts < 1 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: max_attempts is %, it must be at least 1', enqueue.max_attempts
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
    INSERT INTO pgdrain.jobs (kind, payload, run_at, max_attempts, dedupe_key, priority, group_key, timeout_ms, status, waiting_for, last_error, finished_at)
    VALUES (enqueue.kind, enqueue.payload, due, coalesce(enqueue.max_attempts, 3), enqueue.dedupe_key, coalesce(enqueue.priority, 0), enqueue.group_key,
            enqueue.timeout_ms,
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
--> statement-breakpoint
-- pgdrain.cancel(id): a pending, delayed or waiting job is cancelled at once ('cancelled': kept for
-- its kind's keepCompletedSeconds, else deleted); a running one is asked to stop ('cancelling'): its
-- drainer aborts the handler at its next lease renewal and the job ends cancelled, never retried.
-- Jobs waiting for a cancelled one become dead. A completed or dead job cannot be cancelled; an
-- unknown id is an error. Both raise with SQLSTATE 55000 or P0002 and a message saying which.
CREATE OR REPLACE FUNCTION pgdrain.cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $cancel$
DECLARE
  current text;
BEGIN
  SELECT status INTO current FROM pgdrain.jobs WHERE id = cancel.job_id FOR UPDATE;
  IF current IS NULL THEN
    RAISE EXCEPTION 'pgdrain.cancel: job % does not exist (completed jobs are deleted unless their kind keeps them)', cancel.job_id
      USING ERRCODE = 'no_data_found';
  ELSIF current = 'cancelled' THEN
    RETURN 'cancelled';
  ELSIF current IN ('completed', 'dead') THEN
    RAISE EXCEPTION 'pgdrain.cancel: job % is %; only a pending, waiting or running job can be cancelled', cancel.job_id, current
      USING ERRCODE = 'object_not_in_prerequisite_state';
  ELSIF current = 'running' THEN
    UPDATE pgdrain.jobs SET cancel_requested_at = coalesce(cancel_requested_at, now()) WHERE id = cancel.job_id;
    PERFORM pg_notify('pgdrain_cancel', cancel.job_id::text);
    RETURN 'cancelling';
  END IF;
  -- pending or waiting: cancelled now. Kept like a completed job, or deleted (a watcher is told).
  WITH ended AS (
    UPDATE pgdrain.jobs SET status = 'cancelled', finished_at = now(), cancel_requested_at = now(), waiting_for = NULL,
           keep_until = now() + make_interval(secs => coalesce(keep_seconds, 0))
     WHERE id = cancel.job_id
    RETURNING id, kind, watched_until, has_dependents),
  told AS (
    INSERT INTO pgdrain.finished_jobs (id, kind, status) SELECT id, kind, 'cancelled' FROM ended WHERE watched_until > now() ON CONFLICT (id) DO NOTHING)
  SELECT NULL INTO current;
  -- Jobs waiting for it, and for those, become dead.
  WITH RECURSIVE doomed(id, cause) AS (
    SELECT d.job_id, d.depends_on FROM pgdrain.job_dependencies d WHERE d.depends_on = cancel.job_id
    UNION
    SELECT d.job_id, doomed.cause FROM pgdrain.job_dependencies d JOIN doomed ON d.depends_on = doomed.id)
  UPDATE pgdrain.jobs c SET status = 'dead', finished_at = now(), waiting_for = NULL, last_error = format('job %s it waits for ended cancelled', x.cause)
    FROM (SELECT DISTINCT ON (id) id, cause FROM doomed) x
   WHERE c.id = x.id AND c.status = 'waiting';
  DELETE FROM pgdrain.jobs WHERE id = cancel.job_id AND coalesce(keep_seconds, 0) = 0;
  PERFORM pg_notify('pgdrain_finished', cancel.job_id::text);
  RETURN 'cancelled';
END
$cancel$;
