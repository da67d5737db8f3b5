-- pgdrain.after_jobs_ended(ended_ids, ended_kinds, ended_statuses, watched, gone): what follows when
-- jobs end, whichever statement ended them — complete, fail, release, reap, delete
-- (src/queries/job-ended.ts calls it from inside each, in the same statement) and pgdrain.cancel().
-- Given the ended jobs (their new status: 'completed', 'dead', 'cancelled', or 'deleted' for a job a
-- person deleted; 'pending' ones — a retry, a release — are passed over), whether someone waits on
-- each (GET /jobs/:id?waitSeconds), and whether their rows are gone:
--   - whoever waits on one is notified ({{FINISHED_CHANNEL}}); when its row is gone, a line in
--     pgdrain.finished_jobs says how it ended;
--   - jobs waiting (`after`) for one that completed count one fewer; at zero they are pending;
--   - jobs waiting for one that ended dead, cancelled or deleted — and, transitively, the jobs
--     waiting for them — become dead, saying which, with their dead letters
--     (pgdrain.send_dead_letters()); but a workflow parked on it (step.invoke: its step row names
--     the child) is made pending whichever way it ended, to see how when it runs.
-- Returns the kinds of the jobs it made pending (dead letters included; NULL: none), whose drainers
-- are notified; the drainer whose statement called it claims them at once.
--
-- Its statements see what the calling statement wrote (a VOLATILE function's statements each take
-- a fresh snapshot, after the caller's changes), and every transaction that committed before them —
-- so also a job that began to wait for an ended one while the ending statement waited for its row (a
-- workflow's park on a child, an enqueue with `after`: both lock the row they wait for first): it is
-- released here, not left waiting for ever. Jobs waiting (`after`) are locked in id order, waiting
-- for them: two statements that release the same jobs queue up instead of deadlocking. A workflow
-- run is locked without waiting (SKIP LOCKED): one that is locked is parking this moment (its park
-- waits for the child's row and finds it ended), being released or cancelled by someone else, or
-- woken by an event — waiting for it could deadlock with the park, which holds the run and waits for
-- the child. One held by anyone else is noted in pgdrain.runs_to_recheck, and the next housekeeping
-- round releases it if it is still parked on an ended child (src/queries/prune.ts).
--
-- Called only for ended jobs that have dependents or watchers: the plain settlement pays nothing.
CREATE OR REPLACE FUNCTION pgdrain.after_jobs_ended(ended_ids bigint[], ended_kinds text[], ended_statuses text[],
                                                    watched boolean[], gone boolean)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Its plans are generic (the arrays' sizes unknown) and led by primary keys; should an estimate still
-- pass jit_above_cost on a stock server, a JIT compile would cost more than the whole statement.
SET jit = off
AS $after_jobs_ended$
DECLARE
  made_pending text[];
  killed_ids bigint[];
  lettered text[];
  told bigint;
BEGIN
  IF gone THEN
    INSERT INTO pgdrain.finished_jobs (id, kind, status)
    SELECT e.id, e.kind, e.status FROM unnest(ended_ids, ended_kinds, ended_statuses, watched) AS e(id, kind, status, watched)
     WHERE e.watched AND e.status <> 'pending'
    ON CONFLICT (id) DO NOTHING;
  END IF;
  PERFORM pg_notify('{{FINISHED_CHANNEL}}', e.id::text)
     FROM unnest(ended_ids, ended_statuses, watched) AS e(id, status, watched)
    WHERE e.watched AND e.status <> 'pending';

  WITH RECURSIVE ended AS (
    SELECT * FROM unnest(ended_ids, ended_statuses) AS e(id, status) WHERE e.status <> 'pending'),
  pairs AS MATERIALIZED (
    SELECT d.job_id, d.depends_on, e.status, w.job_id IS NOT NULL AS invoked
      FROM ended e JOIN pgdrain.job_dependencies d ON d.depends_on = e.id
      -- A probe of the step's primary key (job_id first) per pair, never a scan of every step.
      LEFT JOIN LATERAL (SELECT s.job_id FROM pgdrain.workflow_steps s
                          WHERE s.job_id = d.job_id AND s.child_id = d.depends_on AND s.status = 'waiting'
                          LIMIT 1) w ON true),
  due AS MATERIALIZED (
    SELECT p.job_id, count(*)::int AS n, bool_or(p.invoked) AS invoked FROM pairs p
     WHERE p.status = 'completed' OR p.invoked
     GROUP BY p.job_id),
  doomed(id, cause, cause_status) AS (
    SELECT p.job_id, p.depends_on, p.status FROM pairs p WHERE p.status <> 'completed' AND NOT p.invoked
    UNION
    SELECT d.job_id, doomed.cause, doomed.cause_status FROM pgdrain.job_dependencies d JOIN doomed ON d.depends_on = doomed.id),
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
           last_error = 'job ' || x.cause || ' it waits for ended ' || x.cause_status
      FROM (SELECT DISTINCT ON (id) id, cause, cause_status FROM doomed ORDER BY id, cause) x
     WHERE c.id = x.id AND c.status = 'waiting' AND c.id = ANY (ARRAY(SELECT id FROM waits))
    RETURNING c.id, c.watched_until),
  watchers AS (SELECT count(pg_notify('{{FINISHED_CHANNEL}}', k.id::text)) AS n FROM killed k WHERE k.watched_until > now())
  SELECT (SELECT array_agg(DISTINCT r.kind) FROM released r WHERE r.status = 'pending'),
         (SELECT array_agg(k.id) FROM killed k), (SELECT n FROM watchers)
    INTO made_pending, killed_ids, told;
  IF killed_ids IS NOT NULL THEN
    lettered := pgdrain.send_dead_letters(killed_ids);
  END IF;
  PERFORM pg_notify('{{NOTIFY_CHANNEL}}', k) FROM unnest(made_pending) AS k;
  RETURN ARRAY(SELECT unnest(made_pending) UNION SELECT unnest(lettered));
END
$after_jobs_ended$;
