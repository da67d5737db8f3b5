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
-- Records a step's run (src/workflows/): `completed` with its result, or `failed` with its error,
-- while the job is still running under `token` and nobody asked to cancel it; returns 'written',
-- 'lost' (someone else holds the job now) or 'cancelled'. `share_lock`: hold the job's row until
-- the caller's transaction commits (a transactional step's record, whose writes commit with it:
-- the reaper cannot take the job back in between). A function so that its plan is made once per
-- connection: a step is the hot path of a workflow.
CREATE OR REPLACE FUNCTION pgdrain.record_step(
  job_id bigint, token text, name text, step_position integer, status text, attempts integer, result jsonb, error text,
  started_at timestamptz, share_lock boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $record_step$
DECLARE
  asked timestamptz;
BEGIN
  IF share_lock THEN
    SELECT j.cancel_requested_at INTO asked FROM pgdrain.jobs j
     WHERE j.id = record_step.job_id AND j.locked_by = record_step.token AND j.status = 'running' FOR SHARE;
  ELSE
    SELECT j.cancel_requested_at INTO asked FROM pgdrain.jobs j
     WHERE j.id = record_step.job_id AND j.locked_by = record_step.token AND j.status = 'running';
  END IF;
  IF NOT FOUND THEN
    RETURN 'lost';
  ELSIF asked IS NOT NULL THEN
    RETURN 'cancelled';
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, error, started_at, finished_at)
  VALUES (record_step.job_id, record_step.name, record_step.step_position, record_step.status, record_step.attempts, record_step.result,
          record_step.error, record_step.started_at, now())
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, result = excluded.result, error = excluded.error,
        started_at = excluded.started_at, finished_at = now(), wake_at = NULL;
  RETURN 'written';
END
$record_step$;
--> statement-breakpoint
-- step.sleep: parks the run until `until` (kept from a first park: a sleep's end does not move when
-- the run is re-entered) — the job `waiting`, its lock cleared and its attempt refunded —, or, when
-- that time has come, completes the step. Fenced like pgdrain.record_step(); outcome 'parked' (until
-- until_at), 'done', 'lost' or 'cancelled'.
CREATE OR REPLACE FUNCTION pgdrain.park_sleep(
  job_id bigint, token text, name text, step_position integer, started_at timestamptz, until timestamptz,
  OUT outcome text, OUT until_at timestamptz
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $park_sleep$
DECLARE
  asked timestamptz;
  ends timestamptz;
BEGIN
  SELECT j.cancel_requested_at INTO asked FROM pgdrain.jobs j
   WHERE j.id = park_sleep.job_id AND j.locked_by = park_sleep.token AND j.status = 'running' FOR UPDATE;
  IF NOT FOUND THEN
    outcome := 'lost';
    RETURN;
  ELSIF asked IS NOT NULL THEN
    outcome := 'cancelled';
    RETURN;
  END IF;
  SELECT s.wake_at INTO ends FROM pgdrain.workflow_steps s WHERE s.job_id = park_sleep.job_id AND s.name = park_sleep.name AND s.status = 'sleeping';
  ends := coalesce(ends, park_sleep.until);
  IF ends <= now() THEN
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, finished_at)
    VALUES (park_sleep.job_id, park_sleep.name, park_sleep.step_position, 'completed', 1, park_sleep.started_at, now())
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE SET status = 'completed', finished_at = now(), wake_at = NULL;
    outcome := 'done';
    RETURN;
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at)
  VALUES (park_sleep.job_id, park_sleep.name, park_sleep.step_position, 'sleeping', 1, park_sleep.started_at, ends)
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE SET status = 'sleeping', finished_at = NULL, wake_at = ends;
  UPDATE pgdrain.jobs j SET status = 'waiting', waiting_for = NULL, locked_at = NULL, locked_by = NULL, locked_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_sleep.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_sleep$;
--> statement-breakpoint
-- step.waitForEvent: the first event of this name and key sent since the run was enqueued that no
-- earlier wait of the run took answers it at once ('done', with `answer`); none: the run parks
-- until one is sent, or until its timeout (kept from a first park), when the step completes with
-- null. Under the event's lock, which pgdrain.send_event() takes too: an event sent meanwhile is
-- either seen here or sees the park. Fenced like pgdrain.record_step().
CREATE OR REPLACE FUNCTION pgdrain.park_wait(
  job_id bigint, token text, name text, step_position integer, started_at timestamptz, event text, key text, until timestamptz,
  OUT outcome text, OUT until_at timestamptz, OUT answer jsonb
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $park_wait$
DECLARE
  created timestamptz;
  asked timestamptz;
  ends timestamptz;
  found_id bigint;
  found_payload jsonb;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('pgdrain.event:' || park_wait.event || ':' || park_wait.key, 0));
  SELECT j.created_at, j.cancel_requested_at INTO created, asked FROM pgdrain.jobs j
   WHERE j.id = park_wait.job_id AND j.locked_by = park_wait.token AND j.status = 'running' FOR UPDATE;
  IF NOT FOUND THEN
    outcome := 'lost';
    RETURN;
  ELSIF asked IS NOT NULL THEN
    outcome := 'cancelled';
    RETURN;
  END IF;
  SELECT e.id, e.payload INTO found_id, found_payload FROM pgdrain.events e
   WHERE e.event = park_wait.event AND e.event_key = park_wait.key AND e.sent_at >= created
     AND e.id > coalesce((SELECT max(s.event_id) FROM pgdrain.workflow_steps s
                           WHERE s.job_id = park_wait.job_id AND s.event = park_wait.event AND s.event_key = park_wait.key AND s.name <> park_wait.name), 0)
   ORDER BY e.id LIMIT 1;
  SELECT s.wake_at INTO ends FROM pgdrain.workflow_steps s WHERE s.job_id = park_wait.job_id AND s.name = park_wait.name AND s.status = 'waiting';
  ends := coalesce(ends, park_wait.until);
  IF found_id IS NOT NULL OR ends <= now() THEN
    answer := CASE WHEN found_id IS NOT NULL THEN coalesce(found_payload, 'null'::jsonb) ELSE 'null'::jsonb END;
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, started_at, finished_at, event, event_key, event_id)
    VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'completed', 1, answer, park_wait.started_at, now(), park_wait.event, park_wait.key, found_id)
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'completed', result = excluded.result, finished_at = now(), wake_at = NULL, event = excluded.event, event_key = excluded.event_key, event_id = excluded.event_id;
    outcome := 'done';
    RETURN;
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, event, event_key)
  VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'waiting', 1, park_wait.started_at, ends, park_wait.event, park_wait.key)
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = 'waiting', result = NULL, finished_at = NULL, wake_at = ends, event = excluded.event, event_key = excluded.event_key, event_id = NULL;
  UPDATE pgdrain.jobs j SET status = 'waiting', waiting_for = NULL, locked_at = NULL, locked_by = NULL, locked_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_wait.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_wait$;
--> statement-breakpoint
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
