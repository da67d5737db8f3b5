-- pgdrain.park_sleep(…): step.sleep — the run snoozes until `until` (kept from a first park: a
-- sleep's end does not move when the run is re-entered) — the job `pending` with run_at then, its
-- lock cleared and its attempt refunded —, or, when that time has come, the step completes. Fenced
-- like pgdrain.record_step(); outcome 'parked' (until until_at), 'done', 'lost' or 'cancelled'.
CREATE OR REPLACE FUNCTION pgdrain.park_sleep(
  job_id bigint, token text, name text, step_position integer, started_at timestamptz, until timestamptz,
  step_type text DEFAULT 'sleep', OUT outcome text, OUT until_at timestamptz
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
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, finished_at, type)
    VALUES (park_sleep.job_id, park_sleep.name, park_sleep.step_position, 'completed', 1, park_sleep.started_at, now(), park_sleep.step_type)
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'completed', finished_at = now(), wake_at = NULL, type = coalesce(s.type, excluded.type);
    outcome := 'done';
    RETURN;
  END IF;
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, started_at, wake_at, type)
  VALUES (park_sleep.job_id, park_sleep.name, park_sleep.step_position, 'sleeping', 1, park_sleep.started_at, ends, park_sleep.step_type)
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = 'sleeping', finished_at = NULL, wake_at = ends, type = coalesce(s.type, excluded.type);
  UPDATE pgdrain.jobs j SET status = 'pending', run_at = ends, waiting_for = NULL, locked_at = NULL, locked_by = NULL,
         locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = park_sleep.job_id;
  outcome := 'parked';
  until_at := ends;
END
$park_sleep$;
