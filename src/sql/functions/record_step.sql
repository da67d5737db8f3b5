-- pgdrain.record_step(…): records a step's run (src/workflows/): `completed` with its result, or
-- `failed` with its error, while the job is still running under `token` and nobody asked to cancel
-- it; returns 'written', 'lost' (someone else holds the job now) or 'cancelled'. `share_lock`: hold
-- the job's row until the caller's transaction commits (a transactional step's record, whose writes
-- commit with it: the reaper cannot take the job back in between). A function so that its plan is
-- made once per connection: a step is the hot path of a workflow. `step_type`: what the run called
-- (run, patched; a step.invoke's completion keeps its row's first type): a replay compares it.
--
-- Durable: it turns synchronous_commit on for the transaction it runs in (set_config(…, true) lasts
-- until it ends), so the drain pool's other statements keep their asynchronous commit while a
-- step's record is flushed before the run goes on (a record lost in a crash would run the step
-- again: the card charged twice).
--
-- A completed record stays completed. When the connection breaks after PostgreSQL committed a
-- transactional step but before the answer arrived, the step hears an error although it committed,
-- and the attempt would record its failure; a completed record is what a committed step left, so a
-- failure never replaces it: the next attempt finds it completed and goes on (`npm run chaos --
-- --long` saw a run's row twice before). A completion replaces a completion (a plain step run again
-- after a crash), and a failure replaces a failure.
CREATE OR REPLACE FUNCTION pgdrain.record_step(
  job_id bigint, token text, name text, step_position integer, status text, attempts integer, result jsonb, error text,
  started_at timestamptz, share_lock boolean DEFAULT false, step_type text DEFAULT 'run'
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
  INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, error, started_at, finished_at, type)
  VALUES (record_step.job_id, record_step.name, record_step.step_position, record_step.status, record_step.attempts, record_step.result,
          record_step.error, record_step.started_at, now(), record_step.step_type)
  ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, result = excluded.result, error = excluded.error,
        started_at = excluded.started_at, finished_at = now(), wake_at = NULL, type = coalesce(s.type, excluded.type)
    WHERE s.status <> 'completed' OR excluded.status = 'completed';
  RETURN 'written';
END
$record_step$;
