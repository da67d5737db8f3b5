// fail: below max_attempts the job goes back to pending with run_at pushed out by exponential
// backoff with jitter (capped); at max_attempts, or for a permanent failure, it becomes dead and
// waits for a person. Fenced by the claim's lock token like complete.
import { sql } from 'drizzle-orm';
import { type Db, rowsOf } from './db.ts';
import type { HeldJob } from './complete.ts';

/** last_error is kept to this many characters so a huge stack cannot bloat the row. */
export const MAX_ERROR_LENGTH = 4000;

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
  /** The lock token no longer matches: the job was reaped and belongs to someone else now. */
  | { outcome: 'lost' };

export async function fail(db: Db, job: HeldJob, options: FailOptions): Promise<FailOutcome> {
  const base = options.backoff?.baseSeconds ?? 1;
  const cap = options.backoff?.capSeconds ?? 3600;
  const floor = options.retryAfterSeconds ?? 0;
  const error = options.error.slice(0, MAX_ERROR_LENGTH);
  // delay = min(cap, max(retryAfter, base * 2^(attempts-1) * jitter)), jitter uniform in [0.5, 1).
  const rows = await rowsOf<{ status: 'pending' | 'dead'; run_at_ms: number; attempts: number }>(
    db,
    sql`UPDATE jobs SET
          status = CASE WHEN attempts >= max_attempts OR ${options.permanent ?? false}::boolean THEN 'dead' ELSE 'pending' END,
          run_at = CASE WHEN attempts >= max_attempts OR ${options.permanent ?? false}::boolean THEN run_at
                        ELSE now() + make_interval(secs => least(${cap}::float8, greatest(${floor}::float8,
                               ${base}::float8 * power(2, attempts - 1) * (0.5 + random() / 2)))) END,
          locked_at = NULL, locked_by = NULL, last_error = ${error}
        WHERE id = ${job.id}::bigint AND locked_by = ${job.lockedBy} AND status = 'running'
        RETURNING status, extract(epoch from run_at) * 1000 AS run_at_ms, attempts`,
  );
  const row = rows[0];
  if (!row) return { outcome: 'lost' };
  return row.status === 'dead'
    ? { outcome: 'dead', attempts: row.attempts }
    : { outcome: 'retry', runAt: new Date(Number(row.run_at_ms)), attempts: row.attempts };
}
