-- pgdrain.park_steps(job_id, token, parks): the steps an attempt parks on at once — Promise.all over
-- sleeps, waits for events and children — recorded together, in one statement; the run wakes at the
-- first of them that is due. It takes the parks
-- as a JSON array, each one of
--   {"type": "sleep", "name", "position", "started_at", "until"}
--   {"type": "wait",  "name", "position", "started_at", "event", "key", "until" (or null), "match" (or null)}
--   {"type": "child", "name", "position", "started_at", "child_id"}   (the child enqueued in this transaction, or before)
-- each with the step's type as the run called it in "step_type" (sleep or sleepUntil; waitForEvent; invoke),
-- and records each as park_sleep(), park_wait() and step.invoke's park do: one that is done already
-- (a sleep whose end has come, a wait an event answers, a child that has ended) completes, or is
-- left to the caller to read (a child). When some are done, the attempt goes on (the run gets what
-- is done, and parks on the rest later, at a call with none done: Promise.race goes on with the
-- first). When all the others parked, the attempt ends, fenced, attempt refunded:
--   some with a time (a sleep, a timed wait)   pending, run_at at the earliest of them; an event or a
--                                              child's end makes it due sooner (send_event, job-ended)
--   none with a time                           waiting (for its first child to end, or an event)
-- One row per park (name, outcome 'parked' or 'done', until_at, answer); or one row with a NULL
-- name and outcome 'lost' or 'cancelled' when the job is not held, and nothing written.
CREATE OR REPLACE FUNCTION pgdrain.park_steps(job_id bigint, token text, parks jsonb)
RETURNS TABLE (name text, outcome text, until_at timestamptz, answer jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $park_steps$
DECLARE
  created timestamptz;
  asked timestamptz;
  p jsonb;
  step_name text;
  step_type text;
  ends timestamptz;
  found_id bigint;
  found_payload jsonb;
  child bigint;
  child_status text;
  earliest timestamptz;
  parked_any boolean := false;
  done_any boolean := false;
  children integer := 0;
BEGIN
  -- The events' locks first, in one order (send_event takes them too, one at a time).
  PERFORM pg_advisory_xact_lock(hashtextextended('pgdrain.event:' || w.event || ':' || w.key, 0))
     FROM (SELECT DISTINCT e->>'event' AS event, e->>'key' AS key FROM jsonb_array_elements(park_steps.parks) e
            WHERE e->>'type' = 'wait' ORDER BY 1, 2) w;
  SELECT j.created_at, j.cancel_requested_at INTO created, asked FROM pgdrain.jobs j
   WHERE j.id = park_steps.job_id AND j.locked_by = park_steps.token AND j.status = 'running' FOR UPDATE;
  IF NOT FOUND OR asked IS NOT NULL THEN
    name := NULL;
    outcome := CASE WHEN asked IS NOT NULL THEN 'cancelled' ELSE 'lost' END;
    RETURN NEXT;
    RETURN;
  END IF;
  FOR p IN SELECT e FROM jsonb_array_elements(park_steps.parks) e LOOP
    step_name := p->>'name';
    step_type := coalesce(p->>'step_type', CASE p->>'type' WHEN 'sleep' THEN 'sleep' WHEN 'wait' THEN 'waitForEvent' ELSE 'invoke' END);
    name := step_name;
    until_at := NULL;
    answer := NULL;
    IF p->>'type' = 'sleep' THEN
      SELECT s.wake_at INTO ends FROM pgdrain.workflow_steps s
       WHERE s.job_id = park_steps.job_id AND s.name = step_name AND s.status = 'sleeping';
      ends := coalesce(ends, (p->>'until')::timestamptz);
      IF ends <= now() THEN
        INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, finished_at, type)
        VALUES (park_steps.job_id, step_name, (p->>'position')::int, 'completed', 1, (p->>'started_at')::timestamptz, now(), step_type)
        ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
          SET status = 'completed', finished_at = now(), wake_at = NULL, type = coalesce(s.type, excluded.type);
        outcome := 'done';
      ELSE
        INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, type)
        VALUES (park_steps.job_id, step_name, (p->>'position')::int, 'sleeping', 1, (p->>'started_at')::timestamptz, ends, step_type)
        ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
          SET status = 'sleeping', finished_at = NULL, wake_at = ends, type = coalesce(s.type, excluded.type);
        outcome := 'parked';
        until_at := ends;
        earliest := least(earliest, ends);
      END IF;
    ELSIF p->>'type' = 'wait' THEN
      -- An event no earlier wait of the run on this event and key took, this park's siblings included.
      SELECT e.id, e.payload INTO found_id, found_payload FROM pgdrain.events e
       WHERE e.event = p->>'event' AND e.event_key = p->>'key' AND e.sent_at >= created
         AND (p->'match' IS NULL OR jsonb_typeof(p->'match') = 'null' OR e.payload @> (p->'match'))
         AND e.id > coalesce((SELECT max(s.event_id) FROM pgdrain.workflow_steps s
                               WHERE s.job_id = park_steps.job_id AND s.event = p->>'event' AND s.event_key = p->>'key'
                                 AND s.name <> step_name), 0)
       ORDER BY e.id LIMIT 1;
      SELECT s.wake_at INTO ends FROM pgdrain.workflow_steps s
       WHERE s.job_id = park_steps.job_id AND s.name = step_name AND s.status = 'waiting';
      ends := coalesce(ends, (p->>'until')::timestamptz);
      IF found_id IS NOT NULL OR ends <= now() THEN
        answer := CASE WHEN found_id IS NOT NULL THEN coalesce(found_payload, 'null'::jsonb) ELSE 'null'::jsonb END;
        INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, started_at, finished_at,
                                                 event, event_key, event_match, event_id, type)
        VALUES (park_steps.job_id, step_name, (p->>'position')::int, 'completed', 1, answer, (p->>'started_at')::timestamptz, now(),
                p->>'event', p->>'key', nullif(p->'match', 'null'::jsonb), found_id, step_type)
        ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
          SET status = 'completed', result = excluded.result, finished_at = now(), wake_at = NULL, event = excluded.event,
              event_key = excluded.event_key, event_match = excluded.event_match, event_id = excluded.event_id,
              type = coalesce(s.type, excluded.type);
        outcome := 'done';
      ELSE
        INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, event, event_key, event_match, type)
        VALUES (park_steps.job_id, step_name, (p->>'position')::int, 'waiting', 1, (p->>'started_at')::timestamptz, ends,
                p->>'event', p->>'key', nullif(p->'match', 'null'::jsonb), step_type)
        ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
          SET status = 'waiting', result = NULL, finished_at = NULL, wake_at = ends, event = excluded.event,
              event_key = excluded.event_key, event_match = excluded.event_match, event_id = NULL,
              type = coalesce(s.type, excluded.type);
        outcome := 'parked';
        until_at := ends;
        earliest := least(earliest, ends);
      END IF;
    ELSIF p->>'type' = 'child' THEN
      child := (p->>'child_id')::bigint;
      SELECT c.status INTO child_status FROM pgdrain.jobs c WHERE c.id = child FOR UPDATE;
      UPDATE pgdrain.jobs c SET has_dependents = true WHERE c.id = child AND c.has_dependents IS NOT TRUE;
      INSERT INTO pgdrain.job_dependencies (depends_on, job_id) VALUES (child, park_steps.job_id) ON CONFLICT DO NOTHING;
      INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, child_id, type)
      VALUES (park_steps.job_id, step_name, (p->>'position')::int, 'waiting', 1, (p->>'started_at')::timestamptz, child, step_type)
      ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
        SET status = 'waiting', child_id = excluded.child_id, finished_at = NULL, wake_at = NULL, type = coalesce(s.type, excluded.type);
      IF child_status IN ('pending', 'running', 'waiting') THEN
        outcome := 'parked';
        children := children + 1;
      ELSE
        outcome := 'done'; -- it has ended (the caller reads how)
      END IF;
    ELSE
      RAISE EXCEPTION 'pgdrain.park_steps: a park''s type is sleep, wait or child, not %', p->>'type'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    parked_any := parked_any OR outcome = 'parked';
    done_any := done_any OR outcome = 'done';
    RETURN NEXT;
  END LOOP;
  IF parked_any AND NOT done_any THEN
    UPDATE pgdrain.jobs j
       SET status = CASE WHEN earliest IS NULL THEN 'waiting' ELSE 'pending' END,
           run_at = coalesce(earliest, j.run_at),
           waiting_for = CASE WHEN earliest IS NULL AND children > 0 THEN 1 END,
           locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
     WHERE j.id = park_steps.job_id;
  END IF;
END
$park_steps$;
