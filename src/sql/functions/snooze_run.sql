-- pgdrain.snooze_run(…): a step's own retry (step.run(name, fn, { maxAttempts, backoff })), or a
-- step that waits for an attempt with room for its timeoutMs: the run snoozes until `until` — the job
-- pending then, its lock cleared and its attempt refunded, as a park leaves it — and, with a `name`,
-- the step's failure is recorded in the same statement (`attempts` tries so far, `error`, wake_at:
-- its next try), unless the step's record is completed already (pgdrain.record_step() says why).
-- Fenced like pgdrain.record_step(); outcome 'parked', 'lost' or 'cancelled'.
CREATE OR REPLACE FUNCTION pgdrain.snooze_run(
  job_id bigint, token text, until timestamptz, name text, step_position integer, started_at timestamptz, attempts integer, error text,
  OUT outcome text
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $snooze_run$
DECLARE
  asked timestamptz;
BEGIN
  SELECT j.cancel_requested_at INTO asked FROM pgdrain.jobs j
   WHERE j.id = snooze_run.job_id AND j.locked_by = snooze_run.token AND j.status = 'running' FOR UPDATE;
  IF NOT FOUND THEN
    outcome := 'lost';
    RETURN;
  ELSIF asked IS NOT NULL THEN
    outcome := 'cancelled';
    RETURN;
  END IF;
  IF snooze_run.name IS NOT NULL THEN
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, error, started_at, finished_at, wake_at, type)
    VALUES (snooze_run.job_id, snooze_run.name, snooze_run.step_position, 'failed', snooze_run.attempts, snooze_run.error,
            snooze_run.started_at, now(), snooze_run.until, 'run')
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'failed', attempts = excluded.attempts, error = excluded.error, finished_at = now(), wake_at = excluded.wake_at,
          type = coalesce(s.type, excluded.type)
      WHERE s.status <> 'completed';
  END IF;
  UPDATE pgdrain.jobs j SET status = 'pending', run_at = snooze_run.until, waiting_for = NULL, locked_at = NULL, locked_by = NULL,
         locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = snooze_run.job_id;
  outcome := 'parked';
END
$snooze_run$;
