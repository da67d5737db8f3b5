// Inspection and repair: what a person (or the HTTP API) uses to look at the queue and act on
// dead jobs. None of these are on the drain's hot path.
import { and, desc, eq, getTableColumns, lt, sql } from 'drizzle-orm';
import { type JobRow, type JobStatus, jobs } from '../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, fromDriverRow, rowsOf } from './db.ts';
import { listPausedKinds } from './pause.ts';

export type Job = Omit<JobRow, 'dedupeKey' | 'visibilitySeconds'> & {
  dedupeKey: string | null;
  visibilitySeconds: number | null;
};

const jobFromRow = (row: Record<string, unknown>): Job => {
  const job = fromDriverRow<JobRow>(getTableColumns(jobs), row);
  return { ...job, id: String(job.id) };
};

export async function getJob(db: Db, id: string): Promise<Job | null> {
  if (!isJobId(id)) return null;
  const [row] = await db.select().from(jobs).where(eq(jobs.id, id)).limit(1);
  return row ? { ...row, id: String(row.id) } : null;
}

export interface ListOptions {
  status?: JobStatus;
  kind?: string;
  limit: number;
  /** The id of the last job of the previous page; pages go newest first. */
  before?: string;
}

export async function listJobs(db: Db, options: ListOptions): Promise<{ jobs: Job[]; nextCursor: string | null }> {
  const rows = await db
    .select()
    .from(jobs)
    .where(
      and(
        options.status ? eq(jobs.status, options.status) : undefined,
        options.kind ? eq(jobs.kind, options.kind) : undefined,
        options.before ? lt(jobs.id, options.before) : undefined,
      ),
    )
    .orderBy(desc(jobs.id))
    .limit(options.limit + 1);
  const page = rows.slice(0, options.limit).map((r) => ({ ...r, id: String(r.id) }));
  return { jobs: page, nextCursor: rows.length > options.limit ? (page.at(-1)?.id ?? null) : null };
}

export interface KindStats {
  pending: number;
  /** Pending and due now. */
  ready: number;
  /** Pending with run_at in the future (a delay or a retry's backoff). */
  delayed: number;
  running: number;
  dead: number;
  /** How long this kind's oldest ready job has waited past its run_at; null when none is ready. */
  oldestReadySeconds: number | null;
  /** No drainer claims it until it is resumed. */
  paused: boolean;
}

export interface QueueStats {
  kinds: Record<string, KindStats>;
  /** How long the oldest ready job has waited past its run_at; null when nothing is ready. */
  oldestReadySeconds: number | null;
}

/** Counts by kind and status, one pass over the table (its cost follows the rows it holds), and
 * which kinds are paused (a paused kind with no jobs is listed too). */
export async function stats(db: Db): Promise<QueueStats> {
  const paused = new Set(await listPausedKinds(db));
  const rows = await rowsOf<{ kind: string; pending: number; ready: number; running: number; dead: number; oldest_ready_seconds: number | null }>(
    db,
    sql`SELECT kind,
               count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'pending' AND run_at <= now())::int AS ready,
               count(*) FILTER (WHERE status = 'running')::int AS running,
               count(*) FILTER (WHERE status = 'dead')::int AS dead,
               extract(epoch from now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_ready_seconds
          FROM ${jobs} GROUP BY kind ORDER BY kind`,
  );
  const kinds: Record<string, KindStats> = {};
  let oldestReadySeconds: number | null = null;
  for (const r of rows) {
    const oldest = r.oldest_ready_seconds == null ? null : Math.max(0, Number(r.oldest_ready_seconds));
    kinds[r.kind] = {
      pending: r.pending, ready: r.ready, delayed: r.pending - r.ready, running: r.running, dead: r.dead,
      oldestReadySeconds: oldest, paused: paused.has(r.kind),
    };
    if (oldest !== null && (oldestReadySeconds === null || oldest > oldestReadySeconds)) oldestReadySeconds = oldest;
  }
  for (const kind of paused) {
    kinds[kind] ??= { pending: 0, ready: 0, delayed: 0, running: 0, dead: 0, oldestReadySeconds: null, paused: true };
  }
  return { kinds, oldestReadySeconds };
}

export type RetryOutcome = { outcome: 'retried'; job: Job } | { outcome: 'not_dead'; status: JobStatus } | { outcome: 'not_found' };

/** A dead job back to pending, due now, with its attempts reset; last_error stays for reference.
 * The drainers are notified by the same statement, so the wake-up commits with the retry. */
export async function retryDead(db: Db, id: string): Promise<RetryOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  const [row] = await rowsOf<Record<string, unknown>>(
    db,
    sql`WITH retried AS (
          UPDATE ${jobs} SET status = 'pending', attempts = 0, run_at = now() WHERE id = ${id}::bigint AND status = 'dead' RETURNING *)
        SELECT retried.*, pg_notify(${NOTIFY_CHANNEL}, retried.kind) AS notified FROM retried`,
  );
  if (row) return { outcome: 'retried', job: jobFromRow(row) };
  const current = await getJob(db, id);
  return current ? { outcome: 'not_dead', status: current.status } : { outcome: 'not_found' };
}

export type DeleteOutcome = { outcome: 'deleted' } | { outcome: 'running' } | { outcome: 'not_found' };

/** Deletes a pending or dead job. A running job is refused: its worker still holds it. */
export async function deleteJob(db: Db, id: string): Promise<DeleteOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  const rows = await rowsOf<{ deleted: boolean; status: JobStatus }>(
    db,
    sql`WITH target AS (SELECT id, status FROM ${jobs} WHERE id = ${id}::bigint),
             del AS (DELETE FROM ${jobs} WHERE id = ${id}::bigint AND status IN ('pending', 'dead') RETURNING id)
        SELECT EXISTS (SELECT 1 FROM del) AS deleted, (SELECT status FROM target) AS status`,
  );
  const row = rows[0];
  if (row?.deleted) return { outcome: 'deleted' };
  return row?.status === 'running' ? { outcome: 'running' } : { outcome: 'not_found' };
}

/** True when the database answers. */
export async function ping(db: Db): Promise<void> {
  await db.execute(sql`SELECT 1`);
}

/** A job id is a positive bigint in decimal; anything else cannot name a job. */
export function isJobId(id: string): boolean {
  return /^[1-9][0-9]{0,18}$/.test(id) && (id.length < 19 || id <= '9223372036854775807');
}
