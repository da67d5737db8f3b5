-- A completed step's record stays completed (wave 5, found by `npm run chaos -- --long`).
--
-- A transactional step's writes and its record commit together. When the connection breaks after
-- PostgreSQL has committed that transaction but before the answer reaches the drainer (a dropped
-- connection, a restart), the step hears an error although it committed. The attempt then wrote
-- the step's failure — pgdrain.record_step() with 'failed', or pgdrain.snooze_run() for a step with
-- tries left — and both replaced the completed record on conflict. The next attempt found the step
-- failed and ran it again: its writes committed twice (the chaos run saw one run's row twice). A
-- completed record is what a committed step left, so a failure no longer replaces it: the next
-- attempt finds it completed and goes on, as if the answer had arrived. A completion still replaces
-- a completion (a plain step run again after a crash), and a failure replaces a failure.
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
  PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
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
        started_at = excluded.started_at, finished_at = now(), wake_at = NULL
    WHERE s.status <> 'completed' OR excluded.status = 'completed';
  RETURN 'written';
END
$record_step$;
--> statement-breakpoint
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
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, error, started_at, finished_at, wake_at)
    VALUES (snooze_run.job_id, snooze_run.name, snooze_run.step_position, 'failed', snooze_run.attempts, snooze_run.error,
            snooze_run.started_at, now(), snooze_run.until)
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = 'failed', attempts = excluded.attempts, error = excluded.error, finished_at = now(), wake_at = excluded.wake_at
      WHERE s.status <> 'completed';
  END IF;
  UPDATE pgdrain.jobs j SET status = 'pending', run_at = snooze_run.until, waiting_for = NULL, locked_at = NULL, locked_by = NULL,
         locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = snooze_run.job_id;
  outcome := 'parked';
END
$snooze_run$;
