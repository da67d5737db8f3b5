-- pgdrain: online
-- Kept jobs out of the hot table. A kind with keepCompletedSeconds used to keep each completed job
-- as a row of pgdrain.jobs (an UPDATE instead of the DELETE): the table every claim walks carried
-- the history, and pruning it was a DELETE per row with the VACUUM that follows. Now the statement
-- that completes a kept job moves it to pgdrain.job_history, partitioned by the day its keep ends
-- (UTC), a partition a day created ahead by pgdrain.maintain_history() (the housekeeping round);
-- a day whose keeps are all over is emptied with TRUNCATE and dropped: no bloat, no VACUUM debt.
-- Readers (getJob, lists, waits, dependencies, the CLI and the dashboard) read the view
-- pgdrain.jobs_and_history. Kept jobs with a dedupe key stay in pgdrain.jobs: its unique index is
-- what holds their key, and no unique index spans partitions.
-- Online: new objects only, and two functions replaced in one statement each. Kept rows already in
-- pgdrain.jobs move to the history in batches of 5,000 by the housekeeping round (src/queries/prune.ts),
-- readable in either place meanwhile.
CREATE TABLE IF NOT EXISTS "pgdrain"."job_history" (
	"id" bigint NOT NULL,
	"kind" text NOT NULL,
	"payload" jsonb NOT NULL,
	"run_at" timestamp with time zone DEFAULT now() NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer DEFAULT 3 NOT NULL,
	"locked_at" timestamp with time zone,
	"locked_by" text,
	"status" text DEFAULT 'pending' NOT NULL,
	"last_error" text,
	"dedupe_key" text,
	"visibility_seconds" integer,
	"priority" integer DEFAULT 0 NOT NULL,
	"group_key" text,
	"timeout_ms" integer,
	"keep_seconds" integer,
	"keep_until" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone,
	"result" jsonb,
	"progress" jsonb,
	"cancel_requested_at" timestamp with time zone,
	"watched_until" timestamp with time zone,
	"waiting_for" integer,
	"has_dependents" boolean,
	"traceparent" text,
	"locked_until" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
) PARTITION BY RANGE ("keep_until");
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."job_history_default" PARTITION OF "pgdrain"."job_history" DEFAULT;
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_history_id" ON "pgdrain"."job_history" USING btree ("id");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_history_default_keep_until" ON "pgdrain"."job_history_default" USING btree ("keep_until");
--> statement-breakpoint
CREATE OR REPLACE VIEW "pgdrain"."jobs_and_history" AS
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at
    FROM pgdrain.jobs
  UNION ALL
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at
    FROM pgdrain.job_history
   WHERE keep_until > now();
--> statement-breakpoint
-- pgdrain.maintain_history(days_ahead): the day partitions from today (UTC) to days_ahead days on
-- (keepCompletedSeconds is at most 30 days, so a kept job always finds its day's partition), and
-- the partitions whose day is over emptied (TRUNCATE: the partition's own lock only) and dropped
-- (which also locks the parent table briefly: under a 1 s lock_timeout, tried again next round
-- when readers hold it). Rows in the default partition whose keep is over are deleted, 5,000 a call.
-- Returns what it did, and when it next has something to do (next_due: the end of the earliest
-- day that holds rows, the earliest keep in the default partition, the next UTC midnight for the
-- partitions ahead), for a drainer that sleeps until then (the Worker's clock). Idempotent; cheap
-- when there is nothing to do (a catalog lookup per day).
CREATE OR REPLACE FUNCTION pgdrain.maintain_history(days_ahead integer DEFAULT 32)
RETURNS TABLE (created integer, dropped integer, pruned integer, next_due timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $maintain$
DECLARE
  today date := (now() AT TIME ZONE 'UTC')::date;
  d date;
  part record;
  has_rows boolean;
BEGIN
  created := 0; dropped := 0; pruned := 0;
  FOR i IN 0..days_ahead LOOP
    d := today + i;
    CONTINUE WHEN to_regclass(format('pgdrain.job_history_p%s', to_char(d, 'YYYYMMDD'))) IS NOT NULL;
    BEGIN
      EXECUTE format('CREATE TABLE pgdrain.%I PARTITION OF pgdrain.job_history FOR VALUES FROM (%L) TO (%L)',
                     'job_history_p' || to_char(d, 'YYYYMMDD'), d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
      created := created + 1;
    EXCEPTION WHEN check_violation OR lock_not_available OR duplicate_table THEN
      -- The default partition holds rows of that day (or another round made it just now): they
      -- stay where they are, pruned row by row.
      NULL;
    END;
  END LOOP;
  FOR part IN
    SELECT c.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pgdrain.job_history'::regclass AND c.relname ~ '^job_history_p[0-9]{8}$'
       AND (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= now()
     ORDER BY c.relname
  LOOP
    BEGIN
      EXECUTE format('TRUNCATE pgdrain.%I', part.relname);
      EXECUTE format('DROP TABLE pgdrain.%I', part.relname);
      dropped := dropped + 1;
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
  END LOOP;
  DELETE FROM pgdrain.job_history_default WHERE keep_until IN (
    SELECT keep_until FROM pgdrain.job_history_default WHERE keep_until <= now() ORDER BY keep_until LIMIT 5000);
  GET DIAGNOSTICS pruned = ROW_COUNT;
  next_due := ((today + 1)::timestamp AT TIME ZONE 'UTC');
  FOR part IN
    SELECT c.relname, (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' AS day_end
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pgdrain.job_history'::regclass AND c.relname ~ '^job_history_p[0-9]{8}$'
     ORDER BY c.relname
  LOOP
    EXIT WHEN part.day_end >= next_due;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM pgdrain.%I)', part.relname) INTO has_rows;
    IF has_rows THEN
      next_due := part.day_end;
      EXIT;
    END IF;
  END LOOP;
  next_due := least(next_due, (SELECT min(keep_until) FROM pgdrain.job_history_default));
  RETURN NEXT;
END
$maintain$;
--> statement-breakpoint
SELECT pgdrain.maintain_history();
--> statement-breakpoint
-- pgdrain.cancel(id) as before, and a job in the history answers as it ended: cancelled stays
-- cancelled, completed is refused.
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
    SELECT status INTO current FROM pgdrain.job_history WHERE id = cancel.job_id AND keep_until > now();
  END IF;
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
--> statement-breakpoint
-- pgdrain.enqueue() as in 0009, with `after` finding kept jobs that finished in the history.
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
  -- same jobs cannot deadlock), refused when one does not exist. A kept job that finished is in
  -- pgdrain.job_history: final, nothing to lock. One that moved there while this statement ran is
  -- looked for again by the next (a fresh snapshot).
  IF cardinality(waits_for) > 0 THEN
    WITH parents AS MATERIALIZED (
      SELECT l.id FROM pgdrain.jobs l WHERE l.id = ANY(waits_for) ORDER BY l.id FOR UPDATE),
    marked AS (
      UPDATE pgdrain.jobs p SET has_dependents = true FROM parents l WHERE p.id = l.id RETURNING p.id, p.status),
    found AS (
      SELECT m.id, m.status FROM marked m
      UNION ALL
      SELECT h.id, h.status FROM pgdrain.job_history h WHERE h.id = ANY(waits_for) AND h.keep_until > now())
    SELECT array_agg(DISTINCT f.id), count(DISTINCT f.id) FILTER (WHERE f.status <> 'completed'),
           min(f.id) FILTER (WHERE f.status IN ('dead', 'cancelled'))
      INTO found_ids, unfinished, ended_parent FROM found f;
    IF coalesce(cardinality(found_ids), 0) < cardinality(waits_for) THEN
      SELECT array_agg(DISTINCT f.id), count(DISTINCT f.id) FILTER (WHERE f.status <> 'completed'), min(f.id) FILTER (WHERE f.status IN ('dead', 'cancelled'))
        INTO found_ids, unfinished, ended_parent
        FROM (SELECT m.id, m.status FROM pgdrain.jobs m WHERE m.id = ANY(waits_for) AND m.has_dependents
              UNION ALL
              SELECT h.id, h.status FROM pgdrain.job_history h WHERE h.id = ANY(waits_for) AND h.keep_until > now()) f;
    END IF;
    IF coalesce(cardinality(found_ids), 0) < cardinality(waits_for) THEN
      RAISE EXCEPTION 'pgdrain.enqueue: after names jobs that do not exist: %', ARRAY(SELECT unnest(waits_for) EXCEPT SELECT unnest(found_ids) ORDER BY 1)
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF ended_parent IS NOT NULL THEN
      SELECT status INTO ended_status FROM pgdrain.jobs_and_history WHERE id = ended_parent;
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
