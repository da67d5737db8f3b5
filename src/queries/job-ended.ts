// What follows, in the same statement, when jobs end — whichever statement ended them (complete,
// fail, release, reap). Each is a CTE over the ended rows (a CTE named `ended` with id, kind,
// status — the new one —, watched_until and has_dependents), so it commits or rolls back with the
// ending itself, and costs a scan of those few returned rows when nothing depends on them:
//   - jobs waiting (`after`) for one that completed count one fewer; at zero they are pending and
//     their drainers are woken;
//   - jobs waiting for one that ended dead or cancelled (or was deleted) — and, transitively, jobs
//     waiting for them — become dead, saying which (grandchildren of a dead job are still
//     `waiting`, so the recursion reaches them all), and those whose kind has a dead-letter kind
//     enqueue their letter (dead-letter.ts); but a workflow parked on it (step.invoke: its
//     step row names the child) is made pending whichever way it ended, to see how when it runs;
//   - jobs that began to wait for an ended one while this statement waited for its row (a
//     workflow's park on a child, an enqueue with `after`, committed after the statement's snapshot)
//     are released by pgdrain.release_dependents_missed(), which looks again with a fresh snapshot
//     (drizzle/0023); it runs only when an ended job has dependents;
//   - someone waiting for a job that reached a final state or was deleted (GET /jobs/:id?waitSeconds)
//     is notified, and when its row is deleted, a line in pgdrain.finished_jobs says how it ended.
// The statement must begin `WITH RECURSIVE` (the dead ones are found recursively) and select
// `ENDED_FOLLOWED` so that the notifications, which only read, are evaluated.
import { type SQL, sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA, finishedJobs, jobDependencies, jobs, workflowSteps } from '../db/schema.ts';
import { FINISHED_CHANNEL, NOTIFY_CHANNEL } from './db.ts';
import { deadLetterIdFor, deadLettersOf } from './dead-letter.ts';

/** The RETURNING list a statement that ends jobs gives its `ended` CTE (`status` computed by it). */
export const ENDED_COLUMNS = sql`j.id, j.kind, j.watched_until, j.has_dependents`;

/** The CTEs that follow `ended`, to append after it: `, released AS (…), …`. `deleted`: the rows are
 * gone, so a watcher's answer is written to finished_jobs. */
export function afterJobsEnded(options: { deleted: boolean }): SQL {
  // Jobs waiting for the ended ones are locked first, in id order: two settlements that release
  // the same waiting jobs then queue up behind each other instead of deadlocking. Only those this
  // statement releases or kills are locked: one that holds a waiting job's lock is then always
  // about to release it, which pgdrain.release_dependents_missed() counts on when it passes by a
  // locked workflow run.
  return sql`,
    touched AS MATERIALIZED (
      SELECT d.job_id, d.depends_on,
             EXISTS (SELECT 1 FROM ${workflowSteps} s WHERE s.job_id = d.job_id AND s.child_id = d.depends_on
               AND s.status = 'waiting') AS invoked
        FROM ${jobDependencies} d WHERE d.depends_on IN (SELECT id FROM ended WHERE has_dependents)),
    doomed(id, cause, cause_status) AS (
      SELECT t.job_id, e.id, e.status FROM touched t JOIN ended e ON t.depends_on = e.id
       WHERE e.status IN ('dead', 'cancelled', 'deleted') AND NOT t.invoked
      UNION
      SELECT d.job_id, doomed.cause, doomed.cause_status FROM ${jobDependencies} d
        JOIN doomed ON d.depends_on = doomed.id),
    ends_counted AS MATERIALIZED (
      SELECT t.job_id, count(*)::int AS n FROM touched t JOIN ended e ON t.depends_on = e.id
       WHERE e.status = 'completed' OR (t.invoked AND e.status IN ('dead', 'cancelled', 'deleted'))
       GROUP BY t.job_id),
    locked AS MATERIALIZED (
      SELECT c.id FROM ${jobs} c WHERE c.id IN (SELECT job_id FROM ends_counted UNION SELECT id FROM doomed)
        AND c.status = 'waiting'
       ORDER BY c.id FOR UPDATE),
    released AS (
      UPDATE ${jobs} c SET waiting_for = c.waiting_for - x.n, status = CASE
        WHEN c.waiting_for - x.n <= 0 THEN 'pending' ELSE 'waiting' END
        FROM ends_counted x
       WHERE c.id = x.job_id AND c.status = 'waiting' AND c.id IN (SELECT id FROM locked)
         AND c.id NOT IN (SELECT id FROM doomed)
      RETURNING c.id, c.kind, c.status),
    killed AS (
      UPDATE ${jobs} c SET status = 'dead', finished_at = now(), waiting_for = NULL,
             last_error = 'job ' || x.cause || ' it waits for ended ' || x.cause_status,
             ${deadLetterIdFor(sql`true`, 'c')}
        FROM (SELECT DISTINCT ON (id) id, cause, cause_status FROM doomed ORDER BY id, cause) x
       WHERE c.id = x.id AND c.status = 'waiting' AND c.id IN (SELECT id FROM locked)
      RETURNING c.id, c.kind, c.watched_until, c.payload, c.attempts, c.last_error, c.finished_at,
        c.dead_letter_id)${deadLettersOf('killed', 'killed_lettered')},
    ${
      options.deleted
        ? sql`told AS (
      INSERT INTO ${finishedJobs} (id, kind, status)
      SELECT id, kind, status FROM ended WHERE watched_until > now() ON CONFLICT (id) DO NOTHING),`
        : sql``
    }
    missed AS (
      SELECT ${sql.raw(PGDRAIN_SCHEMA)}.release_dependents_missed(array_agg(id), array_agg(status),
               (SELECT array_agg(id) FROM locked)) AS kinds
        FROM ended WHERE has_dependents HAVING count(*) > 0),
    woken AS (
      SELECT count(pg_notify(${NOTIFY_CHANNEL}, kind)) AS n
        FROM (SELECT kind FROM released WHERE status = 'pending' UNION SELECT kind FROM killed_lettered) AS k),
    watchers AS (
      SELECT count(pg_notify(${FINISHED_CHANNEL}, id::text)) AS n
        FROM (SELECT id, watched_until FROM ended WHERE status IN ('completed', 'dead', 'cancelled', 'deleted')
          UNION ALL SELECT id, watched_until FROM killed) f
       WHERE watched_until > now())`;
}

/** Select this from the statement's main query: it evaluates the notifications. */
export const ENDED_FOLLOWED = sql`(SELECT n FROM woken) + (SELECT n FROM watchers)
  + coalesce(cardinality((SELECT kinds FROM missed)), 0) AS pgdrain_notified`;

/** The kinds of the jobs the statement made pending (its own release and the missed ones'): their
 * drainer claims them at once. */
export const RELEASED_KINDS = sql`(SELECT kind FROM released WHERE status = 'pending'
  UNION SELECT unnest(kinds) FROM missed)`;
