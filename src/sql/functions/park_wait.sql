-- pgdrain.park_wait(…): step.waitForEvent — the first event of this name and key sent since the run
-- was enqueued that no earlier wait of the run took, and whose payload contains `match` (when
-- given), answers the step at once ('done', its payload); none: the run parks — with a timeout it is
-- pending until then (run_at at the timeout, when the step completes with null), without one it is
-- `waiting` until its event (pgdrain.send_event() makes it pending). Under the event's lock (the
-- one send_event takes), so an event sent meanwhile is either seen here or sees the park. Fenced
-- like pgdrain.record_step(); outcome 'parked', 'done', 'lost' or 'cancelled'.
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
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, started_at, finished_at, event, event_key, event_match,
                                             event_id, type)
    VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'completed', 1, answer, park_wait.started_at, now(), park_wait.event, park_wait.key,
            park_wait.match, found_id, 'waitForEvent')
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'completed', result = excluded.result, finished_at = now(), wake_at = NULL, event = excluded.event, event_key = excluded.event_key,
          event_match = excluded.event_match, event_id = excluded.event_id, type = coalesce(s.type, excluded.type);
    outcome := 'done';
    RETURN;
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, event, event_key, event_match, type)
  VALUES (park_wait.job_id, park_wait.name, park_wait.step_position, 'waiting', 1, park_wait.started_at, ends, park_wait.event, park_wait.key, park_wait.match,
          'waitForEvent')
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = 'waiting', result = NULL, finished_at = NULL, wake_at = ends, event = excluded.event, event_key = excluded.event_key,
        event_match = excluded.event_match, event_id = NULL, type = coalesce(s.type, excluded.type);
  UPDATE pgdrain.jobs j SET status = CASE WHEN ends IS NULL THEN 'waiting' ELSE 'pending' END, run_at = coalesce(ends, j.run_at),
         waiting_for = NULL, locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_wait.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_wait$;
