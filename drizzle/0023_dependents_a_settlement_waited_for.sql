-- Jobs that began to wait for a job while the statement that ended it waited for its row.
--
-- A statement that ends jobs (complete, fail, release, reap: src/queries/job-ended.ts) finds the
-- jobs waiting for them and releases them in the same statement. It reads them with its snapshot,
-- taken when it began. Whoever makes a job wait for another locks that other job's row first:
-- pgdrain.park_steps() (a workflow parked on a child, step.invoke) and an enqueue with `after`.
-- When such a transaction holds the row, the ending statement waits for it, and once it commits,
-- goes on with the snapshot it had: it does not see the workflow parked `waiting` (it sees it
-- running) or the new dependent (not there), and released nobody. The workflow waited for ever
-- (found by the fan-out benchmark: 500 runs of 20 children each hung 2 times in 3).
--
-- This function looks again with a snapshot of its own: a VOLATILE function's statements each take
-- a fresh one, which sees every transaction that committed before it, so every one the ending
-- statement waited for. It is given the ended jobs and the jobs the statement locked to release or
-- kill itself (`handled`), and does for the others what the statement does for those it sees:
--   - a workflow parked on an ended child (its step names the child) is made pending, whichever way
--     the child ended. It is locked without waiting: one that is locked is parking this moment (its
--     park waits for the child's row and finds it ended), or being released by another ending
--     statement (those lock only the jobs they release or kill), cancelled, or woken by an event.
--     Waiting instead could deadlock with the park, which holds the run and waits for the child;
--   - a job waiting (`after`) for a completed one counts one fewer; at zero it is pending;
--   - a job waiting for one that ended dead or cancelled (or was deleted) is dead, and so are the
--     jobs waiting for it, each with its dead letter when its kind has a dead-letter kind.
-- Those are locked in id order, waiting, as the statement's own pass locks them.
-- Returns the kinds of the jobs it made pending (NULL: none); their drainers are notified, and the
-- drainer whose statement it was claims them at once, as it does those its statement released.
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
