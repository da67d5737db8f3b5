// waiting: a job that waits for others (`after`), in one transaction: the jobs it waits for are
// marked as having dependents — which locks them, so none can complete before this job is
// committed and counted —, then it is inserted `waiting` with the count of those not completed yet
// (`dead` at once if one of them ended dead or cancelled), with a dependency row per id. A kept job
// that finished is in the history (final: nothing to lock), read by a second statement — with a
// fresh snapshot, so one that moved there while the first ran is found. pgdrain.enqueue() in SQL
// does the same.
import { sql } from 'drizzle-orm';
import { type JobStatus, jobDependencies, jobHistory, jobs } from '../../db/schema.ts';
import { compareIds } from '../claim.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from '../db.ts';
import { columnNames, valuesOf } from './columns.ts';
import { type EnqueuedJob, type NewJob, type ReturnedRow, UnknownDependencyError, toEnqueued } from './types.ts';

export async function enqueueWaiting(tx: Db, job: NewJob): Promise<EnqueuedJob> {
  const ids = [...new Set(job.after)];
  const parents = await rowsOf<{ id: string; status: JobStatus }>(
    tx,
    // Locked in id order, so that two enqueues waiting for the same jobs cannot deadlock.
    sql`WITH parents AS MATERIALIZED
      (SELECT id FROM ${jobs} WHERE id = ANY(${sql.param(ids)}::bigint[]) ORDER BY id FOR UPDATE),
             marked AS (UPDATE ${jobs} j SET has_dependents = true FROM parents p WHERE j.id = p.id
               RETURNING j.id::text AS id, j.status)
        SELECT id, status FROM marked`,
  );
  const notMarked = () => ids.filter((id) => !parents.some((p) => p.id === id));
  if (notMarked().length > 0) {
    parents.push(
      ...(await rowsOf<{ id: string; status: JobStatus }>(
        tx,
        sql`SELECT id::text AS id, status FROM ${jobHistory} WHERE id = ANY(${sql.param(notMarked())}::bigint[])
          AND keep_until > now()`,
      )),
    );
  }
  const missing = notMarked();
  if (missing.length > 0) throw new UnknownDependencyError(missing);
  const ended = parents
    .filter((p) => p.status === 'dead' || p.status === 'cancelled')
    .sort((a, b) => compareIds(a.id, b.id))[0];
  const unfinished = parents.filter((p) => p.status !== 'completed').length;
  const status = ended ? 'dead' : unfinished > 0 ? 'waiting' : 'pending';
  const [row] = await rowsOf<ReturnedRow>(
    tx,
    sql`WITH ins AS (
          INSERT INTO ${jobs} (${columnNames()}, status, waiting_for, last_error, finished_at)
          VALUES (${valuesOf(job)}, ${status}, ${ended || unfinished === 0 ? null : unfinished}::int,
                  ${ended ? `job ${ended.id} it waits for ended ${ended.status}` : null}::text,
                    ${ended ? sql`now()` : sql`NULL`})
          RETURNING id, status, run_at, kind),
        deps AS (INSERT INTO ${jobDependencies} (depends_on, job_id) SELECT unnest(${sql.param(ids)}::bigint[]), id
          FROM ins)
        SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted,
               CASE WHEN status = 'pending' AND run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END AS notified
          FROM ins`,
  );
  if (!row) throw new Error('enqueue: the INSERT returned no row');
  return toEnqueued(row);
}
