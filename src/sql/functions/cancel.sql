-- pgdrain.cancel(id): stops a job that has not finished — the one implementation, so SQL users, the
-- API, the CLI and TypeScript get the same (src/queries/cancel.ts):
--   pending, delayed, waiting  cancelled now ('cancelled'): kept for its kind's keepCompletedSeconds,
--                              else deleted; what follows its end is pgdrain.after_jobs_ended()'s, as
--                              for every job that ends — jobs waiting for it become dead (with their
--                              dead letters), a workflow parked on it (its child) is woken to see how
--                              it ended, whoever waits on it is told
--   running                    asked to stop ('cancelling'): its drainer aborts the handler (at once on
--                              a sidecar, which hears the NOTIFY; else at its next lease renewal) and
--                              the job ends cancelled whatever the handler does, never retried
--   cancelled                  as it is; completed or dead: refused (SQLSTATE 55000); unknown: P0002
-- A workflow's children (step.invoke) that have not finished are cancelled with it. A job in the
-- history answers as it ended: cancelled stays cancelled, completed is refused.
CREATE OR REPLACE FUNCTION pgdrain.cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $cancel$
DECLARE
  current text;
  child bigint;
  ended record;
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
    PERFORM pg_notify('{{CANCEL_CHANNEL}}', cancel.job_id::text);
    RETURN 'cancelling';
  END IF;
  -- pending or waiting: cancelled now, kept like a completed job or deleted.
  UPDATE pgdrain.jobs SET status = 'cancelled', finished_at = now(), cancel_requested_at = now(), waiting_for = NULL,
         keep_until = now() + make_interval(secs => coalesce(keep_seconds, 0))
   WHERE id = cancel.job_id
  RETURNING kind, coalesce(watched_until > now(), false) AS watched, coalesce(keep_seconds, 0) = 0 AS gone INTO ended;
  IF ended.gone THEN
    DELETE FROM pgdrain.jobs WHERE id = cancel.job_id;
  END IF;
  PERFORM pgdrain.after_jobs_ended(ARRAY[cancel.job_id], ARRAY[ended.kind], ARRAY['cancelled'], ARRAY[ended.watched],
                                   ended.gone);
  RETURN 'cancelled';
END
$cancel$;
