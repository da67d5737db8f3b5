// complete: success deletes the row (completed rows are what make queue tables slow). One DELETE
// settles a whole batch; each row is fenced by the lock token its claim wrote, so a worker whose
// lock was reaped cannot delete the job that another worker now holds. The same statement adds
// the batch to this minute's completed count (counts.ts).
import { type SQL, sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { countCompleted } from './counts.ts';
import { type Db, rowsOf } from './db.ts';
import { FENCED, type HeldJob, heldRows } from './fence.ts';

export type { HeldJob } from './fence.ts';

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
  return sql`DELETE FROM ${jobs} j USING ${heldRows(held)} WHERE ${FENCED} RETURNING j.id, j.kind`;
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
