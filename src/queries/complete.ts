// complete: success deletes the row (completed rows are what make queue tables slow). One DELETE
// settles a whole batch; each row is fenced by the lock token its claim wrote, so a worker whose
// lock was reaped cannot delete the job that another worker now holds. The same statement adds
// the batch to this minute's completed count (counts.ts).
import { type SQL, sql } from 'drizzle-orm';
import { countCompleted } from './counts.ts';
import { type Db, rowsOf } from './db.ts';

export interface HeldJob {
  id: string;
  lockedBy: string;
}

export interface SettleOptions {
  /** Add the settled jobs to job_counts (the dashboard's chart, /metrics). Default true. */
  recordCounts?: boolean;
}

/**
 * The DELETE of the jobs still held under their tokens, returning (id, kind): a statement of its
 * own here, and the first part of the merged settle-and-claim (complete-and-claim.ts).
 */
export function deleteCompleted(held: readonly HeldJob[]): SQL {
  // Not a prepared statement on purpose: a flush can hold one job or thousands, and a generic
  // plan fitted to neither can turn the pair check into a scan per row. Planning it is cheap
  // next to the rows it deletes. The join drives primary-key lookups from the (id, token) pairs.
  return sql`DELETE FROM pgdrain.jobs j
         USING unnest(${sql.param(held.map((h) => h.id))}::bigint[], ${sql.param(held.map((h) => h.lockedBy))}::text[]) AS h(id, token)
         WHERE j.id = h.id AND j.locked_by = h.token AND j.status = 'running'
     RETURNING j.id, j.kind`;
}

/** Deletes the jobs still held under their tokens; returns the ids actually deleted. */
export async function complete(db: Db, held: readonly HeldJob[], options: SettleOptions = {}): Promise<string[]> {
  if (held.length === 0) return [];
  const deleted = deleteCompleted(held);
  const rows = await rowsOf<{ id: string }>(
    db,
    options.recordCounts === false
      ? deleted
      : sql`WITH done AS (${deleted}),
              counted AS (${countCompleted('done')})
            SELECT id FROM done`,
  );
  return rows.map((r) => String(r.id));
}
