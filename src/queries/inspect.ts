// Inspection and repair: what a person (or the HTTP API) uses to look at the queue and act on
// dead jobs. None of these are on the drain's hot path.
import { and, desc, eq, getTableColumns, getViewSelectedFields, inArray, lt, not, sql } from 'drizzle-orm';
import {
  type JobRow,
  type JobStatus,
  finishedJobs,
  jobDependencies,
  jobHistory,
  jobs,
  jobsAndHistory,
  workflowSteps,
} from '../db/schema.ts';
import { isJobId } from '../jobs/job-options.ts';
import { type Db, NOTIFY_CHANNEL, fromDriverRow, rowsOf } from './db.ts';
import { HISTORY_COLUMNS } from './job-history.ts';
import { ENDED_COLUMNS, ENDED_FOLLOWED, afterJobsEnded } from './job-ended.ts';
import { listPausedKinds } from './pause.ts';

export type Job = Omit<JobRow, 'dedupeKey' | 'visibilitySeconds' | 'startedBy' | 'deadLetterId'> & {
  dedupeKey: string | null;
  visibilitySeconds: number | null;
};

const jobFromRow = (row: Record<string, unknown>): Job => {
  const job = fromDriverRow<JobRow>(getTableColumns(jobs), row);
  return { ...job, id: String(job.id) };
};

export async function getJob(db: Db, id: string): Promise<Job | null> {
  if (!isJobId(id)) return null;
  // A job is in pgdrain.jobs or, kept once finished, in the history: the view reads both.
  const [row] = await db.select().from(jobsAndHistory).where(eq(jobsAndHistory.id, id)).limit(1);
  return row ? { ...row, id: String(row.id) } : null;
}

/** How a job someone waited for ended, when its row is gone (pgdrain.finished_jobs). */
export async function getFinishedJob(
  db: Db,
  id: string,
): Promise<{ id: string; kind: string; status: JobStatus; finishedAt: Date } | null> {
  if (!isJobId(id)) return null;
  const [row] = await db.select().from(finishedJobs).where(eq(finishedJobs.id, id)).limit(1);
  return row ? { ...row, id: String(row.id) } : null;
}

/** Someone will wait up to `seconds` for the job: if its row is deleted meanwhile (completed and
 * not kept, cancelled), the deleting statement leaves a note of how it ended and announces it.
 * Returns false when the job is not there to watch (finished already, or unknown). */
export async function watchJob(db: Db, id: string, seconds: number): Promise<boolean> {
  if (!isJobId(id)) return false;
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`UPDATE ${jobs} SET watched_until = greatest(watched_until, now() + make_interval(secs => ${seconds}::int + 60))
         WHERE id = ${id}::bigint AND status IN ('pending', 'running', 'waiting') RETURNING id`,
  );
  return rows.length > 0;
}

/** The jobs `id` waits for (or waited for), with their state and, where kept, their results. */
export async function getDependencies(
  db: Db,
  id: string,
): Promise<{ id: string; kind: string | null; status: JobStatus | null; result: unknown }[]> {
  const rows = await rowsOf<{ id: string; kind: string | null; status: JobStatus | null; result: unknown }>(
    db,
    sql`SELECT d.depends_on::text AS id, coalesce(j.kind, f.kind) AS kind, coalesce(j.status, f.status) AS status,
      j.result
          FROM ${jobDependencies} d
          LEFT JOIN ${jobsAndHistory} j ON j.id = d.depends_on
          LEFT JOIN ${finishedJobs} f ON f.id = d.depends_on
         WHERE d.job_id = ${id}::bigint ORDER BY d.depends_on`,
  );
  return rows.map((r) => ({ ...r, id: String(r.id) }));
}

/** A job that another names: one it waits for, or one waiting for it. kind and status are null when
 * its row is gone and no note of how it ended is left. */
export interface LinkedJob {
  id: string;
  kind: string | null;
  status: JobStatus | null;
}

/** The jobs `id` waits or waited for (`after`) and those that wait or waited for it, in id order.
 * One statement over job_dependencies' two indexes; a job that was gone is read from its note. */
export async function getJobLinks(db: Db, id: string): Promise<{ dependsOn: LinkedJob[]; dependents: LinkedJob[] }> {
  const rows = await rowsOf<LinkedJob & { side: 'dependsOn' | 'dependents' }>(
    db,
    sql`SELECT l.side, l.id::text AS id, coalesce(j.kind, f.kind) AS kind, coalesce(j.status, f.status) AS status
          FROM (SELECT 'dependsOn' AS side, depends_on AS id FROM ${jobDependencies} WHERE job_id = ${id}::bigint
                UNION ALL
                SELECT 'dependents', job_id FROM ${jobDependencies} WHERE depends_on = ${id}::bigint) l
          LEFT JOIN ${jobsAndHistory} j ON j.id = l.id
          LEFT JOIN ${finishedJobs} f ON f.id = l.id
         ORDER BY l.id`,
  );
  const links = { dependsOn: [] as LinkedJob[], dependents: [] as LinkedJob[] };
  for (const { side, ...job } of rows) links[side].push({ ...job, id: String(job.id) });
  return links;
}

export interface ListOptions {
  status?: JobStatus;
  kind?: string;
  dedupeKey?: string;
  groupKey?: string;
  /** JSON text of an object the payload must contain (`@>`). */
  payloadContains?: string;
  /** Kinds never matched by payloadContains: those that hide part of their payload from readers
   * (a search would tell a reader what the hidden part holds). */
  hiddenPayloadKinds?: readonly string[];
  limit: number;
  /** The id of the last job of the previous page; pages go newest first. */
  before?: string;
}

/** A job as a list shows it: everything but its payload, of which only its size and, when small,
 * the payload itself (for a preview) are read. A page of 1 MB payloads costs what a page of small
 * ones does. */
export type JobSummary = Omit<Job, 'payload' | 'attemptLog'> & {
  /** The payload's size as JSON text, in bytes. */
  payloadBytes: number;
  /** The payload, when payloadBytes is at most SUMMARY_PAYLOAD_BYTES; else null. */
  smallPayload: unknown;
  /** Its JSON text's first PAYLOAD_HEAD_CHARS characters (for a payload too big to read whole). */
  payloadHead: string;
};

/** Payloads up to this size come back whole with a list (their preview can be redacted). */
export const SUMMARY_PAYLOAD_BYTES = 4096;
const PAYLOAD_HEAD_CHARS = 200;

export async function listJobs(
  db: Db,
  options: ListOptions,
): Promise<{ jobs: JobSummary[]; nextCursor: string | null }> {
  const { payload: _payload, attemptLog: _log, ...columns } = getViewSelectedFields(jobsAndHistory);
  const searched = options.payloadContains;
  const hidden = searched ? (options.hiddenPayloadKinds ?? []) : [];
  const text = sql`${jobsAndHistory.payload}::text`;
  const rows = await db
    .select({
      ...columns,
      payloadBytes: sql<number>`octet_length(${text})`.mapWith(Number),
      smallPayload: sql<unknown>`CASE WHEN octet_length(${text}) <= ${SUMMARY_PAYLOAD_BYTES}
        THEN ${jobsAndHistory.payload} END`,
      payloadHead: sql<string>`left(${text}, ${PAYLOAD_HEAD_CHARS})`,
    })
    .from(jobsAndHistory)
    .where(
      and(
        options.status ? eq(jobsAndHistory.status, options.status) : undefined,
        options.kind ? eq(jobsAndHistory.kind, options.kind) : undefined,
        options.dedupeKey ? eq(jobsAndHistory.dedupeKey, options.dedupeKey) : undefined,
        options.groupKey ? eq(jobsAndHistory.groupKey, options.groupKey) : undefined,
        searched ? sql`${jobsAndHistory.payload} @> ${searched}::jsonb` : undefined,
        hidden.length > 0 ? not(inArray(jobsAndHistory.kind, [...hidden])) : undefined,
        options.before ? lt(jobsAndHistory.id, options.before) : undefined,
      ),
    )
    .orderBy(desc(jobsAndHistory.id))
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
  /** Waiting for other jobs to complete (`after`), or workflow runs waiting on a step. */
  waiting: number;
  /** How long this kind's oldest ready job has waited past its run_at; null when none is ready. */
  oldestReadySeconds: number | null;
  /** No drainer claims it until it is resumed. */
  paused: boolean;
  /** Workflow runs held because their code departs from their history (counted in `waiting`). */
  held: number;
  /** A kind with versions: its live jobs by the version they run on ("1" for runs without one). */
  versions?: Record<string, number>;
}

/** A kind with no live jobs. */
export const emptyKindStats = (): KindStats => ({
  pending: 0,
  ready: 0,
  delayed: 0,
  running: 0,
  dead: 0,
  waiting: 0,
  oldestReadySeconds: null,
  paused: false,
  held: 0,
});

export interface QueueStats {
  kinds: Record<string, KindStats>;
  /** How long the oldest ready job has waited past its run_at; null when nothing is ready. */
  oldestReadySeconds: number | null;
}

/** Counts by kind and status, one pass over the table (its cost follows the rows it holds), and
 * which kinds are paused (a paused kind with no jobs is listed too). */
export async function stats(db: Db): Promise<QueueStats> {
  const paused = new Set(await listPausedKinds(db));
  // The live states only: kept completed and cancelled jobs are history (GET /jobs lists them).
  // By kind and version (a versioned workflow's runs, per version), summed per kind here.
  const rows = await rowsOf<{
    kind: string;
    version: number | null;
    pending: number;
    ready: number;
    running: number;
    dead: number;
    waiting: number;
    held: number;
    oldest_ready_seconds: number | null;
  }>(
    db,
    sql`SELECT kind, version,
               count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'pending' AND run_at <= now())::int AS ready,
               count(*) FILTER (WHERE status = 'running')::int AS running,
               count(*) FILTER (WHERE status = 'dead')::int AS dead,
               count(*) FILTER (WHERE status = 'waiting')::int AS waiting,
               count(*) FILTER (WHERE status = 'waiting' AND held IS NOT NULL)::int AS held,
               extract(epoch from now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()))::float8
                 AS oldest_ready_seconds
          FROM ${jobs} WHERE status IN ('pending', 'running', 'dead', 'waiting')
         GROUP BY kind, version ORDER BY kind, version`,
  );
  const kinds: Record<string, KindStats> = {};
  let oldestReadySeconds: number | null = null;
  for (const r of rows) {
    const oldest = r.oldest_ready_seconds == null ? null : Math.max(0, Number(r.oldest_ready_seconds));
    const k = (kinds[r.kind] ??= { ...emptyKindStats(), paused: paused.has(r.kind) });
    k.pending += r.pending;
    k.ready += r.ready;
    k.delayed += r.pending - r.ready;
    k.running += r.running;
    k.dead += r.dead;
    k.waiting += r.waiting;
    k.held += r.held;
    if (oldest !== null && (k.oldestReadySeconds === null || oldest > k.oldestReadySeconds))
      k.oldestReadySeconds = oldest;
    if (r.version !== null || k.versions) {
      k.versions ??= {};
      const version = String(r.version ?? 1);
      k.versions[version] = (k.versions[version] ?? 0) + r.pending + r.running + r.dead + r.waiting;
    }
    if (oldest !== null && (oldestReadySeconds === null || oldest > oldestReadySeconds)) oldestReadySeconds = oldest;
  }
  for (const kind of paused) {
    kinds[kind] ??= { ...emptyKindStats(), paused: true };
  }
  return { kinds, oldestReadySeconds };
}

export type RetryOutcome =
  | { outcome: 'retried'; job: Job }
  | { outcome: 'not_dead'; status: JobStatus }
  | { outcome: 'not_found' };

/** A dead job — or a workflow run held because its code changed — back to pending, due now, with
 * its attempts reset; last_error stays for reference. The drainers are notified by the same
 * statement, so the wake-up commits with the retry. */
export async function retryDead(db: Db, id: string): Promise<RetryOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  const [row] = await rowsOf<Record<string, unknown>>(
    db,
    sql`WITH retried AS (
          UPDATE ${jobs} SET status = 'pending', attempts = 0, lost_attempts = 0, held = NULL, run_at = now()
           WHERE id = ${id}::bigint AND (status = 'dead' OR status = 'waiting' AND held IS NOT NULL) RETURNING *)
        SELECT retried.*, pg_notify(${NOTIFY_CHANNEL}, retried.kind) AS notified FROM retried`,
  );
  if (row) return { outcome: 'retried', job: jobFromRow(row) };
  const current = await getJob(db, id);
  return current ? { outcome: 'not_dead', status: current.status } : { outcome: 'not_found' };
}

export type RetryFromStepOutcome =
  | { outcome: 'retried'; job: Job }
  /** Still pending, running or waiting: a live run is not restarted. */
  | { outcome: 'live'; status: JobStatus }
  /** It has no step of that name (the names it has, in order). */
  | { outcome: 'unknown_step'; steps: string[] }
  | { outcome: 'not_found' };

/**
 * A finished workflow run (dead, completed or cancelled; kept in the history or in pgdrain.jobs),
 * or one held because its code changed, run again from its step `fromStep`: that step's record and
 * those of every step it reached after it are dropped, the earlier ones kept, and the job is pending
 * now with its attempts reset (its result cleared; last_error stays for reference). The dependencies
 * on children of dropped steps go too, so a child of the old run that ends later does not touch the
 * new one. One transaction, in which nothing is written before every check passed; the drainers are
 * notified at its commit.
 */
export async function retryFromStep(db: Db, id: string, fromStep: string): Promise<RetryFromStepOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  return db.transaction(async (tx) => {
    const live = (status: JobStatus) => status === 'pending' || status === 'running' || status === 'waiting';
    // Where the job is, in one snapshot: a concurrent restart moves a kept run from the history to
    // pgdrain.jobs in one statement, so one look sees it in one place or the other, never in neither.
    const [where] = await rowsOf<{ kept: boolean }>(
      tx,
      sql`SELECT false AS kept FROM ${jobs} WHERE id = ${id}::bigint
          UNION ALL
          SELECT true AS kept FROM ${jobHistory} WHERE id = ${id}::bigint AND keep_until > now()`,
    );
    if (!where) return { outcome: 'not_found' };
    // Locked while it is looked at, wherever it is: a second restart of a kept run waits here for the
    // first, then finds it moved (live), never its steps half dropped (an unknown step).
    const [found] = await rowsOf<{ status: JobStatus; held: boolean; kept: boolean }>(
      tx,
      where.kept
        ? sql`SELECT status, false AS held, true AS kept FROM ${jobHistory} WHERE id = ${id}::bigint FOR UPDATE`
        : sql`SELECT status, held IS NOT NULL AS held, false AS kept FROM ${jobs} WHERE id = ${id}::bigint FOR UPDATE`,
    );
    if (!found) return where.kept ? liveOrGone(tx, id) : { outcome: 'not_found' };
    if (live(found.status) && !found.held) return { outcome: 'live', status: found.status };
    const steps = await rowsOf<{ name: string; position: number }>(
      tx,
      sql`SELECT name, position FROM ${workflowSteps} WHERE job_id = ${id}::bigint ORDER BY position`,
    );
    const from = steps.find((step) => step.name === fromStep);
    if (!from) return { outcome: 'unknown_step', steps: steps.map((step) => step.name) };
    if (found.kept) {
      // Back to pgdrain.jobs. Another retry may have moved it first (and committed): it is live now.
      const [moved] = await rowsOf<{ status: JobStatus }>(
        tx,
        sql`WITH moved AS
          (DELETE FROM ${jobHistory} WHERE id = ${id}::bigint AND keep_until > now() RETURNING ${HISTORY_COLUMNS})
            INSERT INTO ${jobs} (${HISTORY_COLUMNS}) SELECT ${HISTORY_COLUMNS} FROM moved RETURNING status`,
      );
      if (!moved) return liveOrGone(tx, id);
    }
    const [row] = await rowsOf<Record<string, unknown>>(
      tx,
      sql`WITH dropped AS (
            DELETE FROM ${workflowSteps} WHERE job_id = ${id}::bigint AND position >= ${from.position}::int
              RETURNING child_id),
          unlinked AS (
            DELETE FROM ${jobDependencies} WHERE job_id = ${id}::bigint
              AND depends_on IN (SELECT child_id FROM dropped) RETURNING 1),
          retried AS (
            UPDATE ${jobs} SET status = 'pending', attempts = 0, lost_attempts = 0, held = NULL, run_at = now(),
                   finished_at = NULL, keep_until = NULL, result = NULL, cancel_requested_at = NULL, waiting_for = NULL,
                   locked_at = NULL, locked_by = NULL, locked_until = NULL
             WHERE id = ${id}::bigint RETURNING *)
          SELECT retried.*, pg_notify(${NOTIFY_CHANNEL}, retried.kind) AS notified,
            (SELECT count(*) FROM unlinked) AS unlinked FROM retried`,
    );
    return { outcome: 'retried', job: jobFromRow(row!) };
  });
}

/** A kept run another restart moved back to pgdrain.jobs (and committed) meanwhile: live now. */
async function liveOrGone(tx: Db, id: string): Promise<RetryFromStepOutcome> {
  const [now] = await rowsOf<{ status: JobStatus }>(tx, sql`SELECT status FROM ${jobs} WHERE id = ${id}::bigint`);
  return now ? { outcome: 'live', status: now.status } : { outcome: 'not_found' };
}

/** A dead job again (retryDead); with `fromStep`, a finished workflow run again from that step
 * (retryFromStep). */
export function retry(
  db: Db,
  id: string,
  options: { fromStep?: string } = {},
): Promise<RetryOutcome | RetryFromStepOutcome> {
  return options.fromStep === undefined ? retryDead(db, id) : retryFromStep(db, id, options.fromStep);
}

export type DeleteOutcome = { outcome: 'deleted' } | { outcome: 'running' } | { outcome: 'not_found' };

/** Deletes a job that is not running (pending, waiting, dead, or kept once finished, wherever it
 * is kept). A running job is refused: its worker still holds it. Jobs waiting for the deleted one
 * become dead. */
export async function deleteJob(db: Db, id: string): Promise<DeleteOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  const rows = await rowsOf<{ deleted: boolean; status: JobStatus }>(
    db,
    sql`WITH target AS (SELECT id, status FROM ${jobs} WHERE id = ${id}::bigint),
             ended AS (DELETE FROM ${jobs} j WHERE id = ${id}::bigint AND status <> 'running'
               RETURNING ${ENDED_COLUMNS}, 'deleted'::text AS status),
             archived AS (DELETE FROM ${jobHistory} WHERE id = ${id}::bigint RETURNING 1)
             ${afterJobsEnded({ gone: true })}
        SELECT EXISTS (SELECT 1 FROM ended)
          OR EXISTS (SELECT 1 FROM archived) AS deleted, (SELECT status FROM target) AS status, ${ENDED_FOLLOWED}`,
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
export { isJobId };
