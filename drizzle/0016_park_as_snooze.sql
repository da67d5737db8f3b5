-- A park is a snooze (wave 5, shape round three). A workflow's sleep, and a wait for an event with
-- a timeout, end their attempt the way a retry's backoff does: the job goes `pending` with run_at at
-- the sleep's end (or the wait's timeout), its lock cleared and its attempt refunded, in the
-- statement that records the step. The claim at that time re-enters the run, and the step completes
-- then. An event makes the runs waiting on it due (run_at = now()); a wait without a timeout stays
-- `waiting` until its event; a child's wait keeps the `after` machinery. So nothing wakes workflows
-- any more: pgdrain.wake_workflows() and the index of wake times it read are gone, and every
-- "next due" is the next run_at.
DROP INDEX "pgdrain"."workflow_steps_wake";
--> statement-breakpoint
DROP FUNCTION IF EXISTS pgdrain.wake_workflows(integer);
--> statement-breakpoint
-- Runs parked by an older version: a sleep or a timed wait becomes pending until its end.
UPDATE pgdrain.jobs j SET status = 'pending', run_at = s.wake_at, waiting_for = NULL
  FROM pgdrain.workflow_steps s
 WHERE j.status = 'waiting' AND s.job_id = j.id AND s.status IN ('sleeping', 'waiting') AND s.wake_at IS NOT NULL;
--> statement-breakpoint
-- step.sleep: the run snoozes until `until` (kept from a first park: a sleep's end does not move when
-- the run is re-entered) — the job `pending` with run_at then, its lock cleared and its attempt
-- refunded —, or, when that time has come, the step completes. Fenced like pgdrain.record_step();
-- outcome 'parked' (until until_at), 'done', 'lost' or 'cancelled'.
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
  UPDATE pgdrain.jobs j SET status = 'pending', run_at = ends, waiting_for = NULL, locked_at = NULL, locked_by = NULL,
         locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_sleep.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_sleep$;
--> statement-breakpoint
-- step.waitForEvent: as in 0015, but a wait with a timeout snoozes until it (`pending`, run_at at
-- the timeout) instead of waiting for a wake-up; a wait without one is `waiting` until its event.
CREATE OR REPLACE FUNCTION pgdrain.park_wait(
  job_id bigint, token text, name text, step_position integer, started_at timestamptz, event text, key text, until timestamptz, match jsonb,
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
     AND (park_wait.match IS NULL OR e.payload @> park_wait.match)
     AND e.id > coalesce((SELECT max(s.event_id) FROM pgdrain.workflow_steps s
                           WHERE s.job_id = park_wait.job_id AND s.event = park_wait.event AND s.event_key = park_wait.key AND s.name <> park_wait.name), 0)
   ORDER BY e.id LIMIT 1;
  SELECT s.wake_at INTO ends FROM pgdrain.workflow_steps s WHERE s.job_id = park_wait.job_id AND s.name = park_wait.name AND s.status = 'waiting';
  ends := coalesce(ends, park_wait.until);
  IF found_id IS NOT NULL OR ends <= now() THEN
    answer := CASE WHEN found_id IS NOT NULL THEN coalesce(found_payload, 'null'::jsonb) ELSE 'null'::jsonb END;
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, started_at, finished_at, event, event_key, event_match, event_id)
    VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'completed', 1, answer, park_wait.started_at, now(), park_wait.event, park_wait.key, park_wait.match, found_id)
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'completed', result = excluded.result, finished_at = now(), wake_at = NULL, event = excluded.event, event_key = excluded.event_key,
          event_match = excluded.event_match, event_id = excluded.event_id;
    outcome := 'done';
    RETURN;
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, event, event_key, event_match)
  VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'waiting', 1, park_wait.started_at, ends, park_wait.event, park_wait.key, park_wait.match)
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = 'waiting', result = NULL, finished_at = NULL, wake_at = ends, event = excluded.event, event_key = excluded.event_key,
        event_match = excluded.event_match, event_id = NULL;
  UPDATE pgdrain.jobs j SET status = CASE WHEN ends IS NULL THEN 'waiting' ELSE 'pending' END, run_at = coalesce(ends, j.run_at),
         waiting_for = NULL, locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_wait.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_wait$;
--> statement-breakpoint
-- pgdrain.send_event() as in 0015, and: a run waiting with a timeout is pending until it, so the
-- event makes it due now, as it makes a run `waiting` without one pending.
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
       AND (s.event_match IS NULL OR send_event.payload @> s.event_match)
    RETURNING s.job_id),
  woken AS (
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now()
      FROM answered a WHERE j.id = a.job_id AND (j.status = 'waiting' OR (j.status = 'pending' AND j.run_at > now()))
    RETURNING j.kind)
  SELECT count(pg_notify('pgdrain_jobs', kind)) INTO notified FROM (SELECT DISTINCT kind FROM woken) k;
  RETURN sent;
END
$send_event$;
