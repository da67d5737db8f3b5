-- pgdrain: online
-- Durable workflows (src/workflows/): a row per step a run reached (pgdrain.workflow_steps), events
-- kept for a retention window (pgdrain.events), pgdrain.send_event() and pgdrain.wake_workflows(),
-- and pgdrain.cancel() taught that a workflow's children go with it and that a workflow parked on a
-- child (step.invoke) is woken, not killed, when that child ends dead or cancelled.
-- Online: new objects only, and one function replaced in one statement.
CREATE TABLE IF NOT EXISTS "pgdrain"."events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"event" text NOT NULL,
	"event_key" text NOT NULL,
	"payload" jsonb,
	"sent_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."workflow_steps" (
	"job_id" bigint NOT NULL,
	"name" text NOT NULL,
	"position" integer NOT NULL,
	"status" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"result" jsonb,
	"error" text,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	"wake_at" timestamp with time zone,
	"event" text,
	"event_key" text,
	"event_id" bigint,
	"child_id" bigint,
	CONSTRAINT "workflow_steps_pkey" PRIMARY KEY("job_id","name"),
	CONSTRAINT "workflow_steps_status_valid" CHECK (status IN ('completed', 'failed', 'sleeping', 'waiting'))
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_lookup" ON "pgdrain"."events" USING btree ("event","event_key","id");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_sent" ON "pgdrain"."events" USING btree ("sent_at");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "workflow_steps_wake" ON "pgdrain"."workflow_steps" USING btree ("wake_at") WHERE status IN ('sleeping', 'waiting') AND wake_at IS NOT NULL;--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "workflow_steps_event" ON "pgdrain"."workflow_steps" USING btree ("event","event_key") WHERE status = 'waiting' AND event IS NOT NULL;;--> statement-breakpoint
-- Sends an event: stored (kept for the retention window) and, in the same transaction, every run
-- waiting for this event and key is answered with its payload and made pending. Call it inside the
-- transaction that makes the event true: a rollback sends nothing and wakes nothing. Returns the
-- event's id.
CREATE OR REPLACE FUNCTION pgdrain.send_event(event text, key text, payload jsonb DEFAULT '{}'::jsonb) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $send_event$
DECLARE
  sent bigint;
  notified bigint;
BEGIN
  IF send_event.event IS NULL OR send_event.event !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
    RAISE EXCEPTION 'pgdrain.send_event: event must be 1-100 letters, digits, or _ . : -' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF send_event.key IS NULL OR length(send_event.key) NOT BETWEEN 1 AND 500 THEN
    RAISE EXCEPTION 'pgdrain.send_event: key must be 1 to 500 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF send_event.payload IS NOT NULL AND octet_length(send_event.payload::text) > 65536 THEN
    RAISE EXCEPTION 'pgdrain.send_event: payload is % bytes of JSON; an event carries at most 65536', octet_length(send_event.payload::text)
      USING ERRCODE = 'program_limit_exceeded';
  END IF;
  -- The waits on this event and key look for it and park under the same lock: an event is never
  -- sent between a wait's look and its park unseen by both.
  PERFORM pg_advisory_xact_lock(hashtextextended('pgdrain.event:' || send_event.event || ':' || send_event.key, 0));
  INSERT INTO pgdrain.events (event, event_key, payload) VALUES (send_event.event, send_event.key, send_event.payload) RETURNING id INTO sent;
  WITH answered AS (
    UPDATE pgdrain.workflow_steps s SET status = 'completed', result = send_event.payload, event_id = sent, finished_at = now(), wake_at = NULL
     WHERE s.status = 'waiting' AND s.event = send_event.event AND s.event_key = send_event.key
    RETURNING s.job_id),
  woken AS (
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now() FROM answered a WHERE j.id = a.job_id AND j.status = 'waiting' RETURNING j.kind)
  SELECT count(pg_notify('pgdrain_jobs', kind)) INTO notified FROM (SELECT DISTINCT kind FROM woken) k;
  RETURN sent;
END
$send_event$;
--> statement-breakpoint
-- Wakes the runs whose sleep ended or whose wait timed out (at most `how_many`, earliest first):
-- the step is completed (a wait's answer is null) and the job pending, its drainers notified.
-- Steps of runs that are no longer waiting (cancelled, dead) lose their wake time. Returns how many
-- it woke and the next wake time after now (null: none). The housekeeping round and the drainers
-- that parked a run call it.
CREATE OR REPLACE FUNCTION pgdrain.wake_workflows(how_many integer DEFAULT 1000, OUT woken integer, OUT next_wake_at timestamptz)
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $wake$
  WITH due AS (
    SELECT s.job_id, s.name FROM pgdrain.workflow_steps s
     WHERE s.status IN ('sleeping', 'waiting') AND s.wake_at <= now()
     ORDER BY s.wake_at LIMIT how_many FOR UPDATE SKIP LOCKED),
  due_jobs AS (
    SELECT j.id FROM pgdrain.jobs j WHERE j.id IN (SELECT job_id FROM due) AND j.status = 'waiting' FOR UPDATE SKIP LOCKED),
  stepped AS (
    UPDATE pgdrain.workflow_steps s SET status = 'completed', finished_at = now(), wake_at = NULL,
           result = CASE WHEN s.status = 'waiting' THEN 'null'::jsonb END
      FROM due WHERE s.job_id = due.job_id AND s.name = due.name AND s.job_id IN (SELECT id FROM due_jobs)
    RETURNING s.job_id),
  stale AS (
    UPDATE pgdrain.workflow_steps s SET wake_at = NULL
      FROM due WHERE s.job_id = due.job_id AND s.name = due.name
       AND NOT EXISTS (SELECT 1 FROM pgdrain.jobs j WHERE j.id = s.job_id AND j.status IN ('waiting', 'running', 'pending'))
    RETURNING 1),
  made_pending AS (
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now() WHERE j.id IN (SELECT job_id FROM stepped) RETURNING j.kind)
  -- (stale, like every data-modifying CTE, runs whether or not it is read.)
  SELECT (SELECT count(*) FROM made_pending)::int,
         (SELECT min(wake_at) FROM pgdrain.workflow_steps WHERE status IN ('sleeping', 'waiting') AND wake_at > now())
    FROM (SELECT count(pg_notify('pgdrain_jobs', kind)) FROM (SELECT DISTINCT kind FROM made_pending) k) AS notified;
$wake$;
--> statement-breakpoint
-- pgdrain.cancel() as in 0010, and: a workflow's children (step.invoke) that have not finished are
-- cancelled with it; a workflow parked on the cancelled job (its child) is woken, not killed (its
-- step fails with the child's end when it runs).
CREATE OR REPLACE FUNCTION pgdrain.cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $cancel$
DECLARE
  current text;
  child bigint;
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
  END IF;
  -- A workflow's children that have not finished go with it.
  FOR child IN
    SELECT s.child_id FROM pgdrain.workflow_steps s JOIN pgdrain.jobs c ON c.id = s.child_id
     WHERE s.job_id = cancel.job_id AND s.child_id IS NOT NULL AND c.status IN ('pending', 'waiting', 'running')
  LOOP
    PERFORM pgdrain.cancel(child);
  END LOOP;
  IF current = 'running' THEN
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
  -- Workflows parked on it (step.invoke) wake to see how it ended.
  WITH woken AS (
    UPDATE pgdrain.jobs c SET status = 'pending', waiting_for = 0, run_at = now()
     WHERE c.status = 'waiting' AND c.id IN (
       SELECT s.job_id FROM pgdrain.workflow_steps s WHERE s.child_id = cancel.job_id AND s.status = 'waiting')
    RETURNING c.kind)
  SELECT NULL INTO current FROM (SELECT count(pg_notify('pgdrain_jobs', kind)) FROM (SELECT DISTINCT kind FROM woken) k) n;
  -- Other jobs waiting for it, and for those, become dead.
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
