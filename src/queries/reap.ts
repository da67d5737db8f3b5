// reap: running rows whose lease has ended belong to a drainer that died or hung. They go back to
// pending with the attempt refunded — the job did not fail, its process did — and the loss counted
// in lost_attempts instead; at MAX_LOST_ATTEMPTS losses the job is dead, saying so (a job that
// reliably kills its worker must not loop forever, and an unrelated crash must not spend a job's
// attempts). The lease is the one the claiming drainer wrote into locked_until (and
// renews), so every reaper — whatever its own settings — applies the lease the holder keeps; only
// a job locked by a drainer older than that column falls back to the reaper's own timeout.
// Idempotent, cheap (it walks the small jobs_running index), safe to call from any process at any
// time. A reaped attempt counts as failed (and dead, when it was the last) in job_counts, in the
// same statement.
import { sql } from 'drizzle-orm';
import { JOB_DEFAULTS, MAX_LOST_ATTEMPTS, jobs } from '../db/schema.ts';
import { countFailed } from './counts.ts';
import { type Db, rowsOf } from './db.ts';
import { DEAD_LETTERED, DEAD_LETTER_KINDS } from './dead-letter.ts';
import { attemptLogWith } from './fail.ts';
import { ENDED_COLUMNS, ENDED_FOLLOWED, afterJobsEnded } from './job-ended.ts';

export interface ReapResult {
  /** Back to pending. */
  reclaimed: string[];
  /** Their last attempt timed out: now dead. */
  dead: string[];
  /** Asked to cancel while their drainer was gone: now cancelled. */
  cancelled: string[];
}

export interface ReapOptions {
  /** Also the jobs held under lock tokens that start with `prefix` but not with `except`, whatever
   * their lease: an earlier process of this drainer's identity, which is gone (its successor holds
   * the identity: src/sidecar/drainer-identity.ts). Fenced by the token: nobody else's are touched. */
  earlierProcess?: { prefix: string; except: string };
}

/** `legacyTimeoutSeconds` applies only to jobs locked without a lease end (by an older drainer). */
export async function reap(
  db: Db,
  legacyTimeoutSeconds: number = JOB_DEFAULTS.visibilityTimeoutSeconds,
  options: ReapOptions = {},
): Promise<ReapResult> {
  const leaseEnd = sql`coalesce(locked_until,
    locked_at + make_interval(secs => coalesce(visibility_seconds, ${legacyTimeoutSeconds}::int)))`;
  const earlier = options.earlierProcess;
  const gone = earlier
    ? sql`(starts_with(locked_by, ${earlier.prefix}::text) AND NOT starts_with(locked_by, ${earlier.except}::text))`
    : sql`false`;
  const spent = sql`lost_attempts + 1 >= ${MAX_LOST_ATTEMPTS}::int`;
  const why = sql`CASE
    WHEN ${leaseEnd} < now() THEN 'visibility timeout: ' || locked_by || ' held the job past its lease of '
      || round(extract(epoch from ${leaseEnd} - locked_at)) || ' s without renewing it'
    ELSE 'drainer restarted: ' || locked_by || ' held the job in an earlier process of the same DRAINER_ID' END`;
  const rows = await rowsOf<{ id: string; status: 'pending' | 'dead' | 'cancelled' }>(
    db,
    sql`WITH ended AS (
        UPDATE ${jobs} j SET
          status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN ${spent} THEN 'dead' ELSE 'pending' END,
          last_error = CASE WHEN cancel_requested_at IS NULL AND ${spent}
            THEN 'lost ' || lost_attempts + 1 || ' times with its drainer (it died or stopped renewing the lease while '
              || 'the job ran; a handler that kills its process ends so); the last: ' || ${why}
            ELSE ${why} END,
          attempt_log = ${attemptLogWith('lost', why)},
          lost_attempts = lost_attempts + 1,
          attempts = greatest(attempts - 1, 0),
          finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR ${spent} THEN now() END,
          keep_until = CASE
            WHEN cancel_requested_at IS NOT NULL THEN now() + make_interval(secs => coalesce(keep_seconds, 0)) END,
          locked_at = NULL, locked_by = NULL, locked_until = NULL
        WHERE status = 'running' AND (${leaseEnd} < now() OR ${gone})
        RETURNING ${ENDED_COLUMNS}, j.status),
      counted AS (${countFailed('ended')})${afterJobsEnded({ gone: false })}${DEAD_LETTERED}
      SELECT id, status, ${ENDED_FOLLOWED}, (SELECT count(*) FROM ${DEAD_LETTER_KINDS} k) AS dead_letters FROM ended`,
  );
  const result: ReapResult = { reclaimed: [], dead: [], cancelled: [] };
  for (const r of rows)
    (r.status === 'dead' ? result.dead : r.status === 'cancelled' ? result.cancelled : result.reclaimed).push(
      String(r.id),
    );
  return result;
}
