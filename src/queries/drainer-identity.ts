// drainer-identity: a sidecar holds its DRAINER_ID for as long as it runs, as a session-level
// advisory lock on a connection of its own. PostgreSQL releases the lock when that session ends —
// at once for a process that was killed (its socket closes with it) — so a process that takes the
// lock knows that no live process of the same identity is left, and may release the jobs an earlier
// one held (reap's earlierProcess). Advisory locks are per database, as the jobs are.
import { sql } from 'drizzle-orm';
import { type Db, rowsOf } from './db.ts';

/** Takes the identity's lock on `session` (a dedicated connection) if nobody holds it; true if taken. */
export async function holdDrainerIdentity(session: Db, drainerId: string): Promise<boolean> {
  const [row] = await rowsOf<{ held: boolean }>(
    session,
    sql`SELECT pg_try_advisory_lock(hashtextextended(${`pgdrain.drainer:${drainerId}`}::text, 0)) AS held`,
  );
  return row?.held === true;
}
