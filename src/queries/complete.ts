// complete: success deletes the row (completed rows are what make queue tables slow), unless the
// job's kind keeps its jobs (keepCompletedSeconds): then the row moves to the history with the
// handler's result (job-history.ts), in the same statement. One statement settles a whole batch; each row is
// fenced by the lock token its claim wrote, so a worker whose lock was reaped cannot settle the
// job that another worker now holds. The same statement adds the batch to this minute's completed
// count (counts.ts) and does what follows a job's end (job-ended.ts: jobs waiting for these, and
// people waiting on them).
import { type SQL, sql } from 'drizzle-orm';
import { jobHistory, jobs } from '../db/schema.ts';
import { countCompleted } from './counts.ts';
import { type Db, rowsOf } from './db.ts';
import { type HeldJob, fenced, heldRows } from './fence.ts';
import { HISTORY_COLUMNS, historyRow } from './job-history.ts';
import { ENDED_COLUMNS, ENDED_FOLLOWED, RELEASED_KINDS, afterJobsEnded } from './job-ended.ts';

export type { HeldJob } from './fence.ts';

export interface SettleOptions {
  /** Add the settled jobs to job_counts (the dashboard's chart, /metrics). Default true. */
  recordCounts?: boolean;
}

/** A held job that completed, and how it is kept. */
export interface CompletedJob extends HeldJob {
  /** Keep the row this long (its kind's keepCompletedSeconds); 0 or unset: delete it. */
  keepSeconds?: number;
  /** What the handler returned, as JSON text (kept jobs only). */
  resultJson?: string | null;
  /** Its last progress report not yet saved (kept jobs only). */
  progressJson?: string;
}

/** How a completing statement ended a job: `cancelled` when someone had asked to cancel it (its
 * handler's result is then dropped). */
export interface EndedJob {
  id: string;
  status: 'completed' | 'cancelled';
}

const isKept = (job: CompletedJob) => (job.keepSeconds ?? 0) > 0;
/** A job someone asked to cancel ends cancelled, whatever its handler did. */
const ENDING_STATUS = sql`CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'completed' END`;
/** Nothing follows this job's end: no job waits for it, nobody waits on it, no cancel was asked.
 * Rechecked on the newest row version if a concurrent enqueue, watch or cancel changed it. */
const UNEVENTFUL = sql`j.has_dependents IS NOT TRUE AND j.cancel_requested_at IS NULL
  AND (j.watched_until IS NULL OR j.watched_until <= now())`;

/**
 * The CTEs that end the held jobs, as `deleted` and/or `kept`, and `ended` over both: the first
 * part of a completing statement, here and in the merged settle-and-claim (complete-and-claim.ts).
 *
 * `followed: false` is the statement almost every completion takes: it ends only jobs after which
 * nothing has to happen (UNEVENTFUL), and has none of what follows a job's end (job-ended.ts), so
 * it costs what a plain DELETE does. The others stay running, and the caller ends them with
 * `followed: true`: jobs waiting for them are counted down or killed, watchers are told, a
 * cancelled one ends cancelled.
 */
export function completingCtes(held: readonly CompletedJob[], { followed }: { followed: boolean }): SQL {
  const deleted = held.filter((h) => !isKept(h));
  const kept = held.filter(isKept);
  const parts: SQL[] = [];
  const fence = (rows: readonly HeldJob[]) => (followed ? fenced(rows) : sql`${fenced(rows)} AND ${UNEVENTFUL}`);
  const status = followed ? ENDING_STATUS : sql`'completed'::text`;
  if (deleted.length > 0) {
    // Not a prepared statement on purpose: a flush can hold one job or thousands, and a generic
    // plan fitted to neither can turn the pair check into a scan per row. Planning it is cheap
    // next to the rows it deletes. The fence's id array drives primary-key lookups.
    parts.push(
      sql`deleted AS
        (DELETE FROM ${jobs} j USING ${heldRows(deleted)} WHERE ${fence(deleted)}
          RETURNING ${ENDED_COLUMNS}, ${status} AS status)`,
    );
  }
  if (kept.length > 0) {
    parts.push(
      sql`held_kept AS MATERIALIZED (SELECT * FROM ${heldRows(kept, {
        keep: { type: 'int', values: kept.map((k) => k.keepSeconds ?? 0) },
        result: { type: 'jsonb', values: kept.map((k) => k.resultJson ?? null) },
        progress: { type: 'jsonb', values: kept.map((k) => k.progressJson ?? null) },
      })})`,
    );
    const result = sql`CASE WHEN j.cancel_requested_at IS NOT NULL THEN NULL ELSE h.result END`;
    // A kept job moves to the history (job-history.ts); one with a dedupe key stays, finished, in
    // pgdrain.jobs, whose unique index is what holds its key while it is kept.
    parts.push(sql`archived AS (
      DELETE FROM ${jobs} j USING held_kept h WHERE ${fence(kept)} AND j.dedupe_key IS NULL
      RETURNING ${historyRow({
        status,
        result,
        progress: sql`coalesce(h.progress, j.progress)`,
        finished_at: sql`now()`,
        keep_until: sql`now() + make_interval(secs => h.keep)`,
        locked_at: sql`NULL::timestamptz`,
        locked_by: sql`NULL::text`,
        locked_until: sql`NULL::timestamptz`,
      })}),
    stored AS (INSERT INTO ${jobHistory} (${HISTORY_COLUMNS}) SELECT ${HISTORY_COLUMNS} FROM archived),
    kept AS (
      UPDATE ${jobs} j SET status = ${status}, result = ${result}, progress = coalesce(h.progress, j.progress),
             finished_at = now(), keep_until = now() + make_interval(secs => h.keep), locked_at = NULL,
               locked_by = NULL, locked_until = NULL
        FROM held_kept h WHERE ${fence(kept)} AND j.dedupe_key IS NOT NULL
      RETURNING ${ENDED_COLUMNS}, j.status)`);
  }
  const union = [
    deleted.length > 0 ? sql`SELECT * FROM deleted` : undefined,
    kept.length > 0
      ? sql`SELECT id, kind, watched_until, has_dependents, status FROM archived UNION ALL SELECT * FROM kept`
      : undefined,
  ].filter((x) => x !== undefined);
  parts.push(sql`ended AS (${sql.join(union, sql` UNION ALL `)})`);
  const ending = sql.join(parts, sql`, `);
  return followed ? sql`${ending}${afterJobsEnded({ gone: deleted.length > 0 })}` : ending;
}

/** Completes the jobs still held under their tokens; returns the ids actually settled. */
export async function complete(db: Db, held: readonly CompletedJob[], options: SettleOptions = {}): Promise<string[]> {
  return (await completeJobs(db, held, options)).ended.map((e) => e.id);
}

/** What a completion did: how each settled job ended, and the kinds of jobs that were waiting for
 * them and are pending now (a drain may claim them at once). */
export interface CompletionReport {
  ended: EndedJob[];
  unblockedKinds: string[];
}

/** complete(), saying what it did: one plain statement, and a second, with what follows a job's
 * end, only for the jobs the first left (and for those it does not hold any more, which the
 * second leaves too). */
export async function completeJobs(
  db: Db,
  held: readonly CompletedJob[],
  options: SettleOptions = {},
): Promise<CompletionReport> {
  const plain = await completing(db, held, false, options);
  if (plain.ended.length === held.length) return plain;
  const settled = new Set(plain.ended.map((e) => e.id));
  const followed = await completeFollowed(
    db,
    held.filter((h) => !settled.has(h.id)),
    options,
  );
  return { ended: [...plain.ended, ...followed.ended], unblockedKinds: followed.unblockedKinds };
}

/** Completes the jobs with what follows their end (for jobs a plain completion left running). */
export function completeFollowed(
  db: Db,
  held: readonly CompletedJob[],
  options: SettleOptions = {},
): Promise<CompletionReport> {
  return completing(db, held, true, options);
}

async function completing(
  db: Db,
  held: readonly CompletedJob[],
  followed: boolean,
  options: SettleOptions,
): Promise<CompletionReport> {
  if (held.length === 0) return { ended: [], unblockedKinds: [] };
  const counted = options.recordCounts === false ? sql`` : sql`, counted AS (${countCompleted('ended')})`;
  if (!followed) {
    // The ids as one text (one row, one field to decode) rather than a row each.
    const [row] = await rowsOf<{ ids: string | null }>(
      db,
      sql`WITH ${completingCtes(held, { followed })}${counted} SELECT string_agg(id::text, ',') AS ids FROM ended`,
    );
    const ids = row?.ids ? row.ids.split(',') : [];
    return { ended: ids.map((id) => ({ id, status: 'completed' as const })), unblockedKinds: [] };
  }
  // One row per ended job, and one more (id NULL) with the kinds it released. The notifications
  // are in that row's output, or they would not be evaluated at all.
  const rows = await rowsOf<{ id: string | null; status: EndedJob['status']; released: string[] | null }>(
    db,
    sql`WITH ${completingCtes(held, { followed })}${counted}
        SELECT id, status, NULL::text[] AS released, NULL::int AS pgdrain_followed FROM ended
        UNION ALL
        SELECT NULL, NULL, (SELECT array_agg(DISTINCT kind) FROM ${RELEASED_KINDS} k), ${ENDED_FOLLOWED}`,
  );
  const ended = rows.filter((r) => r.id !== null).map((r) => ({ id: String(r.id), status: r.status }));
  return { ended, unblockedKinds: rows.find((r) => r.id === null)?.released ?? [] };
}
