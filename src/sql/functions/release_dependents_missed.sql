-- pgdrain.release_dependents_missed(…): kept only for drainers of the last release (0.1.0, wave 5)
-- still running beside this version during a rolling deploy: their statements that end a job with
-- dependents call it, and a call to a function that no longer exists fails the whole statement.
-- Nothing of this version calls it (pgdrain.after_jobs_ended() does its work for every statement
-- that ends a job). Remove it when the oldest version that may run side by side
-- (docs/operations.md; test/side-by-side-upgrade.test.ts) no longer calls it. Its text is the last
-- release's, unchanged.
CREATE OR REPLACE FUNCTION pgdrain.release_dependents_missed(ended_ids bigint[], ended_statuses text[], handled bigint[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Its plan is generic (the arrays' sizes unknown) and led by primary keys; should an estimate still
-- pass jit_above_cost on a stock server, a JIT compile would cost more than the whole statement.
SET jit = off
AS $release_dependents_missed$
DECLARE
  kinds text[];
  told bigint;
BEGIN
  WITH RECURSIVE ended AS (SELECT * FROM unnest(ended_ids, ended_statuses) AS e(id, status)),
  pairs AS MATERIALIZED (
    SELECT d.job_id, d.depends_on, e.status, w.job_id IS NOT NULL AS invoked
      FROM ended e JOIN pgdrain.job_dependencies d ON d.depends_on = e.id
      -- A probe of the step's primary key (job_id first) per pair, never a scan of every step.
      LEFT JOIN LATERAL (SELECT s.job_id FROM pgdrain.workflow_steps s
                          WHERE s.job_id = d.job_id AND s.child_id = d.depends_on AND s.status = 'waiting'
                          LIMIT 1) w ON true
     WHERE d.job_id <> ALL (coalesce(handled, '{}'))),
  due AS MATERIALIZED (
    SELECT p.job_id, count(*)::int AS n, bool_or(p.invoked) AS invoked FROM pairs p
     WHERE p.status = 'completed' OR (p.invoked AND p.status IN ('dead', 'cancelled', 'deleted'))
     GROUP BY p.job_id),
  doomed(id, cause, cause_status) AS (
    SELECT p.job_id, p.depends_on, p.status FROM pairs p
     WHERE p.status IN ('dead', 'cancelled', 'deleted') AND NOT p.invoked
    UNION
    SELECT d.job_id, doomed.cause, doomed.cause_status FROM pgdrain.job_dependencies d JOIN doomed ON d.depends_on = doomed.id
     WHERE d.job_id <> ALL (coalesce(handled, '{}'))),
  waits AS MATERIALIZED (
    SELECT j.id FROM pgdrain.jobs j
     WHERE j.id = ANY (ARRAY(SELECT job_id FROM due WHERE NOT invoked UNION SELECT id FROM doomed))
       AND j.status = 'waiting'
     ORDER BY j.id FOR UPDATE),
  runs AS MATERIALIZED (
    SELECT j.id FROM pgdrain.jobs j
     WHERE j.id = ANY (ARRAY(SELECT job_id FROM due WHERE invoked EXCEPT SELECT id FROM waits))
       AND j.status = 'waiting'
       FOR UPDATE SKIP LOCKED),
  -- Runs due a release that another transaction holds: noted for the next housekeeping round, which
  -- releases those still parked on an ended child (a park that held the run has seen the end itself).
  passed AS (
    INSERT INTO pgdrain.runs_to_recheck (run_id)
    SELECT d.job_id FROM due d
     WHERE d.invoked AND d.job_id NOT IN (SELECT id FROM waits) AND d.job_id NOT IN (SELECT id FROM runs)
       AND EXISTS (SELECT 1 FROM pgdrain.jobs j WHERE j.id = d.job_id AND j.status = 'waiting')
    ON CONFLICT (run_id) DO NOTHING),
  released AS (
    UPDATE pgdrain.jobs j
       SET waiting_for = CASE WHEN due.invoked THEN 0 ELSE j.waiting_for - due.n END,
           status = CASE WHEN due.invoked OR j.waiting_for - due.n <= 0 THEN 'pending' ELSE 'waiting' END
      FROM due
     WHERE j.id = due.job_id AND j.status = 'waiting'
       AND j.id = ANY (ARRAY(SELECT id FROM waits UNION ALL SELECT id FROM runs EXCEPT SELECT id FROM doomed))
    RETURNING j.kind, j.status),
  killed AS (
    UPDATE pgdrain.jobs c SET status = 'dead', finished_at = now(), waiting_for = NULL,
           last_error = 'job ' || x.cause || ' it waits for ended ' || x.cause_status,
           dead_letter_id = (SELECT nextval('pgdrain.jobs_id_seq') FROM pgdrain.dead_letter_routes r WHERE r.kind = c.kind)
      FROM (SELECT DISTINCT ON (id) id, cause, cause_status FROM doomed ORDER BY id, cause) x
     WHERE c.id = x.id AND c.status = 'waiting' AND c.id = ANY (ARRAY(SELECT id FROM waits))
    RETURNING c.id, c.kind, c.watched_until, c.payload, c.attempts, c.last_error, c.finished_at, c.dead_letter_id),
  lettered AS (
    INSERT INTO pgdrain.jobs (id, kind, payload, max_attempts, priority, keep_seconds)
    SELECT e.dead_letter_id, r.dead_letter,
           jsonb_build_object('job', jsonb_build_object('id', e.id::text, 'kind', e.kind, 'payload', e.payload,
             'attempts', e.attempts, 'lastError', e.last_error, 'diedAt', e.finished_at)),
           r.max_attempts, r.priority, r.keep_seconds
      FROM killed e JOIN pgdrain.dead_letter_routes r ON r.kind = e.kind
     WHERE e.dead_letter_id IS NOT NULL
    RETURNING kind),
  watched AS (SELECT count(pg_notify('pgdrain_finished', k.id::text)) AS n FROM killed k WHERE k.watched_until > now())
  SELECT array_agg(k.kind), count(pg_notify('pgdrain_jobs', k.kind)) + (SELECT n FROM watched) INTO kinds, told
    FROM (SELECT r.kind FROM released r WHERE r.status = 'pending' UNION SELECT l.kind FROM lettered l) k;
  RETURN kinds;
END
$release_dependents_missed$;
