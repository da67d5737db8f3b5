-- step.waitForEvent(name, { event, key, match }): `match` is a JSON object the event's payload
-- must contain (jsonb @>). An event that does not match neither answers nor wakes the wait. The
-- wait keeps its match in workflow_steps.event_match; pgdrain.park_wait() takes it as a new last
-- argument (the old eight-argument form is dropped: a default would make calls ambiguous), and
-- pgdrain.send_event() answers only the waits its payload matches.
ALTER TABLE "pgdrain"."workflow_steps" ADD COLUMN "event_match" jsonb;
--> statement-breakpoint
DROP FUNCTION IF EXISTS pgdrain.park_wait(bigint, text, text, integer, timestamptz, text, text, timestamptz);
--> statement-breakpoint
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
  UPDATE pgdrain.jobs j SET status = 'waiting', waiting_for = NULL, locked_at = NULL, locked_by = NULL, locked_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_wait.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_wait$;
--> statement-breakpoint
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
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now() FROM answered a WHERE j.id = a.job_id AND j.status = 'waiting' RETURNING j.kind)
  SELECT count(pg_notify('pgdrain_jobs', kind)) INTO notified FROM (SELECT DISTINCT kind FROM woken) k;
  RETURN sent;
END
$send_event$;
