-- pgdrain.hold_run(job_id, token, held): ends a workflow run's attempt by holding the run — its code
-- no longer matches its recorded history (a deploy changed it while the run was in flight), so the
-- attempt ran nothing and the run waits for a deploy that fits it, or for a person. Fenced like
-- pgdrain.record_step(): only while the attempt holds the job and nobody asked to cancel it. The run
-- is `waiting` with `held` saying why (its message also in last_error), its lock cleared and its
-- attempt refunded; no claim takes it until it is released (a drainer starts with its kind, or a
-- person retries it — from a step or not — or cancels it). Counted in job_counts.diverged.
-- Returns 'held', 'lost' or 'cancelled'.
CREATE OR REPLACE FUNCTION pgdrain.hold_run(job_id bigint, token text, held jsonb) RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $hold_run$
DECLARE
  asked timestamptz;
  run_kind text;
BEGIN
  SELECT j.cancel_requested_at, j.kind INTO asked, run_kind FROM pgdrain.jobs j
   WHERE j.id = hold_run.job_id AND j.locked_by = hold_run.token AND j.status = 'running' FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'lost';
  ELSIF asked IS NOT NULL THEN
    RETURN 'cancelled';
  END IF;
  UPDATE pgdrain.jobs j
     SET status = 'waiting', held = hold_run.held, last_error = left(hold_run.held->>'message', 4000), waiting_for = NULL,
         locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
   WHERE j.id = hold_run.job_id;
  INSERT INTO pgdrain.job_counts AS c (minute, kind, diverged) VALUES (date_trunc('minute', now()), run_kind, 1)
  ON CONFLICT (minute, kind) DO UPDATE SET diverged = c.diverged + 1;
  RETURN 'held';
END
$hold_run$;
