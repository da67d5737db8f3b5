-- pgdrain.record_steps(…): the completed records of steps that finish together, in one statement
-- and one durable commit. The sidecar's drain pool commits asynchronously (synchronous_commit=off: a
-- claim or settlement lost in a crash only runs a job again), but a step's record lost in a server
-- crash after its run went on would run the step again: the card charged twice, where the record
-- promised once. So this function, like pgdrain.record_step(), turns synchronous_commit on for the
-- transaction it runs in (set_config(…, true) lasts until it ends: its COMMIT waits for the WAL
-- flush), and the drain pool's other statements keep theirs.
--
-- A durable commit costs a WAL flush, so pgdrain.record_steps() writes many records at once: the
-- drain collects the records of the steps that finish while one such statement is in flight
-- (src/workflows/step-records.ts) and sends them as arrays, one flush for all. Each record is fenced
-- like pgdrain.record_step()'s: written only while its attempt holds the job, not once a cancel is
-- asked. Outcomes come back by the record's position in the arrays (step_index, from 1).
--
-- The records of one call name distinct steps (the caller sends a second record of a step in a
-- later call): an INSERT … ON CONFLICT cannot update one row twice in a statement.
CREATE OR REPLACE FUNCTION pgdrain.record_steps(
  job_ids bigint[], tokens text[], step_names text[], step_positions integer[], step_attempts integer[],
  step_results text[], started_ats timestamptz[], step_types text[] DEFAULT NULL
) RETURNS TABLE (step_index integer, outcome text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $record_steps$
BEGIN
  PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
  RETURN QUERY
  WITH given AS (
    SELECT * FROM unnest(job_ids, tokens, step_names, step_positions, step_attempts, step_results, started_ats)
      WITH ORDINALITY AS g(job_id, token, name, step_position, attempts, result, started_at, n)
  ), held AS (
    SELECT g.*, j.cancel_requested_at AS asked
      FROM given g JOIN pgdrain.jobs j ON j.id = g.job_id AND j.locked_by = g.token AND j.status = 'running'
  ), written AS (
    INSERT INTO pgdrain.workflow_steps AS s (job_id, name, position, status, attempts, result, error, started_at, finished_at, type)
    SELECT h.job_id, h.name, h.step_position, 'completed', h.attempts, h.result::jsonb, NULL, h.started_at, now(),
           coalesce(step_types[h.n], 'run')
      FROM held h
     WHERE h.asked IS NULL
    ON CONFLICT ON CONSTRAINT workflow_steps_pkey DO UPDATE
      SET status = excluded.status, attempts = excluded.attempts, result = excluded.result, error = NULL,
          started_at = excluded.started_at, finished_at = now(), wake_at = NULL, type = coalesce(s.type, excluded.type)
    RETURNING 1
  )
  SELECT g.n::integer,
         CASE WHEN h.n IS NULL THEN 'lost' WHEN h.asked IS NOT NULL THEN 'cancelled' ELSE 'written' END
    FROM given g LEFT JOIN held h ON h.n = g.n;
END
$record_steps$;
