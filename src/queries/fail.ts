// fail: below max_attempts the job goes back to pending with run_at pushed out by exponential
// backoff with jitter (capped); at max_attempts, or for a permanent failure, it becomes dead and
// waits for a person. Fenced by the claim's lock token like complete.
import { type SQL, sql } from 'drizzle-orm';
import { MAX_ATTEMPT_LOG, jobs } from '../db/schema.ts';
import type { SettleOptions } from './complete.ts';
import { countFailed } from './counts.ts';
import { type Db, rowsOf } from './db.ts';
import { type HeldJob, fenced, heldRows } from './fence.ts';
import { DEAD_LETTERED, DEAD_LETTER_KINDS } from './dead-letter.ts';
import { ENDED_COLUMNS, ENDED_FOLLOWED, RELEASED_KINDS, afterJobsEnded } from './job-ended.ts';

/** last_error is kept to this many characters so a huge stack cannot bloat the row. */
export const MAX_ERROR_LENGTH = 4000;

/** The attempt log of the row `j` (an UPDATE's old values) with its ending attempt appended: when
 * it started, on which drainer, that it failed or was lost, and why; the oldest entry dropped once
 * the log holds MAX_ATTEMPT_LOG. Only the statements that end an attempt without completing it
 * (failJobs, reap) write it. */
export function attemptLogWith(outcome: 'failed' | 'lost', error: SQL): SQL {
  const entry = sql`jsonb_build_object('attempt', j.attempts, 'outcome', ${outcome}::text, 'startedAt', j.locked_at,
    'endedAt', now(), 'drainer', j.locked_by, 'error', ${error})`;
  const log = sql`coalesce(j.attempt_log, '[]'::jsonb)`;
  return sql`CASE WHEN jsonb_array_length(${log}) >= ${MAX_ATTEMPT_LOG}::int THEN ${log} - 0 ELSE ${log} END
    || jsonb_build_array(${entry})`;
}

export interface Backoff {
  /** Delay after the first failure before jitter; doubles with each attempt. Default 1 s. */
  baseSeconds?: number;
  /** Upper bound on the delay. Default 1 hour. */
  capSeconds?: number;
}

export interface FailOptions {
  error: string;
  /** Skip the remaining attempts: the job can never succeed (for example an HTTP 404). */
  permanent?: boolean;
  /** Retry no sooner than this (for example a Retry-After header); still capped. */
  retryAfterSeconds?: number;
  backoff?: Backoff;
}

export type FailOutcome =
  | { outcome: 'retry'; runAt: Date; attempts: number }
  | { outcome: 'dead'; attempts: number }
  /** It had been asked to cancel: it ends cancelled, never retried. */
  | { outcome: 'cancelled' }
  /** The lock token no longer matches: the job was reaped and belongs to someone else now. */
  | { outcome: 'lost' };

export interface Failure extends HeldJob, FailOptions {}

/** One job; see failMany. */
export async function fail(db: Db, job: HeldJob, options: FailOptions & SettleOptions): Promise<FailOutcome> {
  const [outcome] = await failMany(db, [{ id: job.id, lockedBy: job.lockedBy, ...options }], options);
  return outcome as FailOutcome;
}

/**
 * Settles failed attempts in one statement (the drain batches the failures of a burst, as it
 * batches completions) and adds them to this minute's failed and dead counts in the same
 * statement. Returns one outcome per failure, in input order.
 */
export async function failMany(
  db: Db,
  failures: readonly Failure[],
  options: SettleOptions = {},
): Promise<FailOutcome[]> {
  return (await failJobs(db, failures, options)).outcomes;
}

/** failMany(), saying also the kinds of jobs its failures made pending (workflows parked on a job
 * that ended dead: step.invoke), which a drain may claim at once. */
export async function failJobs(
  db: Db,
  failures: readonly Failure[],
  options: SettleOptions = {},
): Promise<{ outcomes: FailOutcome[]; unblockedKinds: string[] }> {
  if (failures.length === 0) return { outcomes: [], unblockedKinds: [] };
  const column = (type: string, pick: (f: Failure) => unknown) => ({ type, values: failures.map(pick) });
  // delay = min(cap, max(retryAfter, base * 2^(attempts-1) * jitter)), jitter uniform in [0.5, 1).
  const failed = heldRows(failures, {
    error: column('text', (f) => f.error.slice(0, MAX_ERROR_LENGTH)),
    permanent: column('boolean', (f) => f.permanent ?? false),
    floor: column('float8', (f) => f.retryAfterSeconds ?? 0),
    base: column('float8', (f) => f.backoff?.baseSeconds ?? 1),
    cap: column('float8', (f) => f.backoff?.capSeconds ?? 3600),
  });
  // A job asked to cancel ends cancelled (never retried), kept like a completed one; one whose
  // attempts are spent, or that failed for good, ends dead; the rest wait out their backoff.
  const ending = sql`CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' WHEN j.attempts >= j.max_attempts
    OR h.permanent THEN 'dead' END`;
  const settled = sql`UPDATE ${jobs} j SET
          status = coalesce(${ending}, 'pending'),
          run_at = CASE WHEN ${ending} IS NOT NULL THEN j.run_at
                        ELSE now() + make_interval(secs => least(h.cap, greatest(h.floor,
                               h.base * power(2, j.attempts - 1) * (0.5 + random() / 2)))) END,
          finished_at = CASE WHEN ${ending} IS NOT NULL THEN now() END,
          keep_until = CASE
            WHEN j.cancel_requested_at IS NOT NULL THEN now() + make_interval(secs => coalesce(j.keep_seconds, 0)) END,
          attempt_log = ${attemptLogWith('failed', sql`h.error`)},
          locked_at = NULL, locked_by = NULL, locked_until = NULL, last_error = h.error
        FROM ${failed} WHERE ${fenced(failures)}
        RETURNING ${ENDED_COLUMNS}, j.status, extract(epoch from j.run_at) * 1000 AS run_at_ms, j.attempts`;
  const counted = options.recordCounts === false ? sql`` : sql`, counted AS (${countFailed('ended')})`;
  // One row per ended job, and one more (id NULL) with the kinds it made pending.
  const rows = await rowsOf<{
    id: string | null;
    status: 'pending' | 'dead' | 'cancelled';
    run_at_ms: number;
    attempts: number;
    released: string[] | null;
  }>(
    db,
    sql`WITH ended AS (${settled})${counted}${afterJobsEnded({ gone: false })}${DEAD_LETTERED}
        SELECT id, status, run_at_ms, attempts, NULL::text[] AS released, NULL::int AS pgdrain_followed FROM ended
        UNION ALL
        SELECT NULL, NULL, NULL, NULL,
               (SELECT array_agg(DISTINCT kind) FROM (${RELEASED_KINDS} UNION ${DEAD_LETTER_KINDS}) k),
               ${ENDED_FOLLOWED}`,
  );
  const byId = new Map(rows.filter((r) => r.id !== null).map((r) => [String(r.id), r]));
  const unblockedKinds = rows.find((r) => r.id === null)?.released ?? [];
  return { outcomes: outcomesOf(failures, byId), unblockedKinds };
}

function outcomesOf(
  failures: readonly Failure[],
  byId: Map<string, { status: 'pending' | 'dead' | 'cancelled'; run_at_ms: number; attempts: number }>,
): FailOutcome[] {
  return failures.map((f): FailOutcome => {
    const row = byId.get(String(f.id));
    if (!row) return { outcome: 'lost' };
    if (row.status === 'cancelled') return { outcome: 'cancelled' };
    return row.status === 'dead'
      ? { outcome: 'dead', attempts: row.attempts }
      : { outcome: 'retry', runAt: new Date(Number(row.run_at_ms)), attempts: row.attempts };
  });
}
