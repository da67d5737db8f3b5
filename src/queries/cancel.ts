// cancel: stop a job that has not finished. One implementation, the SQL function pgdrain.cancel()
// (src/sql/functions/cancel.sql), so SQL users, the API, the CLI and TypeScript get the same:
//   pending, delayed, waiting ──► cancelled now (kept like a completed job, else deleted); jobs
//                                 waiting for it become dead
//   running ──► asked to stop: its drainer aborts the handler at its next lease renewal (at once on
//               a sidecar, which hears the NOTIFY), and it ends cancelled whatever the handler does
//   completed, dead ──► refused (not cancellable); unknown ──► not found; cancelled ──► as it is
import { sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';
import { isJobId } from './inspect.ts';

export type CancelOutcome =
  | { outcome: 'cancelled' }
  /** It was running: its handler is being stopped. */
  | { outcome: 'cancelling' }
  | { outcome: 'not_cancellable'; status: 'completed' | 'dead' }
  | { outcome: 'not_found' };

export async function cancel(db: Db, id: string): Promise<CancelOutcome> {
  if (!isJobId(id)) return { outcome: 'not_found' };
  try {
    const [row] = await rowsOf<{ status: 'cancelled' | 'cancelling' }>(
      db,
      sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.cancel(${id}::bigint) AS status`,
    );
    return { outcome: row?.status === 'cancelling' ? 'cancelling' : 'cancelled' };
  } catch (error) {
    const { code, message } = causeOf(error);
    if (code === 'P0002') return { outcome: 'not_found' };
    if (code === '55000')
      return { outcome: 'not_cancellable', status: /is completed;/.test(message) ? 'completed' : 'dead' };
    throw error;
  }
}

/** The database's own error under the driver's wrapping (drizzle wraps it in `cause`). */
function causeOf(error: unknown): { code?: string; message: string } {
  for (
    let e = error as { code?: string; message?: string; cause?: unknown } | undefined, depth = 0;
    e && depth < 3;
    e = e.cause as typeof e, depth++
  ) {
    if (typeof e.code === 'string') return { code: e.code, message: e.message ?? '' };
  }
  return { message: String((error as Error)?.message ?? error) };
}
