// release: hands back jobs that were claimed but never started (a Worker's budget ran out, the
// sidecar is shutting down), or whose handler a shutting-down sidecar stopped waiting for. They
// keep their place in line and get their attempt back; a reason, if given, goes into last_error.
import { sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';
import { FENCED, type HeldJob, heldRows } from './fence.ts';

/** Returns the ids released; jobs whose lock token no longer matches are left alone. */
export async function release(db: Db, held: readonly HeldJob[], reason?: string): Promise<string[]> {
  if (held.length === 0) return [];
  const rows = await rowsOf<{ id: string }>(
    db,
    sql`UPDATE ${jobs} j SET status = 'pending', locked_at = NULL, locked_by = NULL, locked_until = NULL, attempts = greatest(j.attempts - 1, 0),
               last_error = coalesce(${reason ?? null}::text, j.last_error)
          FROM ${heldRows(held)} WHERE ${FENCED}
     RETURNING j.id`,
  );
  return rows.map((r) => String(r.id));
}
