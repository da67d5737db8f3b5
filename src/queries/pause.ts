// pause / resume a kind: a row in pgdrain.paused_kinds, which every claim reads in its one
// statement, so every drainer (each sidecar, each Worker invocation) stops claiming the kind at
// its next claim and starts again after resume. Enqueueing a paused kind still works; jobs
// already running finish.
import { sql } from 'drizzle-orm';
import { jobs, pausedKinds } from '../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from './db.ts';

/** Idempotent; returns true when this call paused it (false: it already was). */
export async function pauseKind(db: Db, kind: string): Promise<boolean> {
  const rows = await rowsOf<{ kind: string }>(
    db,
    sql`INSERT INTO ${pausedKinds} (kind) VALUES (${kind}) ON CONFLICT (kind) DO NOTHING RETURNING kind`,
  );
  return rows.length > 0;
}

/** Idempotent; wakes the drainers so a backlog of the kind starts at once. Returns true when this
 * call resumed it. */
export async function resumeKind(db: Db, kind: string): Promise<boolean> {
  const rows = await rowsOf<{ kind: string }>(
    db,
    sql`WITH resumed AS (DELETE FROM ${pausedKinds} WHERE kind = ${kind} RETURNING kind)
        SELECT kind, pg_notify(${NOTIFY_CHANNEL}, kind) FROM resumed`,
  );
  return rows.length > 0;
}

export async function listPausedKinds(db: Db): Promise<string[]> {
  const rows = await rowsOf<{ kind: string }>(db, sql`SELECT kind FROM ${pausedKinds} ORDER BY kind`);
  return rows.map((r) => r.kind);
}

/** True when the queue holds jobs of this kind or has it paused: a kind that another drainer
 * pool handles is known here even though this process has no handler for it. (A scan of the
 * table for a kind without jobs: an admin action, not a hot path.) */
export async function kindInQueue(db: Db, kind: string): Promise<boolean> {
  const [row] = await rowsOf<{ known: boolean }>(
    db,
    sql`SELECT EXISTS (SELECT 1 FROM ${pausedKinds} WHERE kind = ${kind})
            OR EXISTS (SELECT 1 FROM ${jobs} WHERE kind = ${kind}) AS known`,
  );
  return row?.known === true;
}
