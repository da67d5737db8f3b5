// release: hands back jobs that were claimed but never started (a Worker's budget ran out, the
// sidecar is shutting down), or whose handler a shutting-down sidecar stopped waiting for. They
// keep their place in line and get their attempt back; a reason, if given, goes into last_error.
import { sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';
import { type HeldJob, fenced, heldRows } from './fence.ts';
import { ENDED_COLUMNS, ENDED_FOLLOWED, afterJobsEnded } from './job-ended.ts';

/** Returns the ids released; jobs whose lock token no longer matches are left alone. */
export async function release(db: Db, held: readonly HeldJob[], reason?: string): Promise<string[]> {
  if (held.length === 0) return [];
  // A job asked to cancel is not handed back: it ends cancelled, kept like a completed one.
  const cancelled = sql`j.cancel_requested_at IS NOT NULL`;
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`WITH ended AS (
          UPDATE ${jobs} j SET status = CASE WHEN ${cancelled} THEN 'cancelled' ELSE 'pending' END,
                 locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0),
                 last_error = coalesce(${reason ?? null}::text, j.last_error),
                 finished_at = CASE WHEN ${cancelled} THEN now() END,
                 keep_until = CASE WHEN ${cancelled} THEN now() + make_interval(secs => coalesce(j.keep_seconds, 0)) END
            FROM ${heldRows(held)} WHERE ${fenced(held)}
          RETURNING ${ENDED_COLUMNS}, j.status)${afterJobsEnded({ gone: false })}
        SELECT id, ${ENDED_FOLLOWED} FROM ended`,
  );
  return rows.map((r) => String(r.id));
}
