// drainer-identity: a sidecar holds its DRAINER_ID for as long as it runs, as a lease row in
// pgdrain.drainers. A process that takes the row knows that no live process of the same identity is
// left, and may release the jobs an earlier one held (reap's earlierProcess).
//
// The holder renews the row every few seconds and deletes it when it stops. A row is free when
//   - its holder's own server session is gone from pg_stat_activity (a holder with a session of its
//     own records it: killed, its socket closed with it, and the row is free at once), or
//   - it was not renewed for `staleSeconds` (a holder behind a transaction pooler has no session of
//     its own: a pooled one outlives the process, and a recycled one says nothing about it).
// A session lock did this before, and a pooler that recycles server sessions dropped it silently:
// a second live process with the same id then released the first one's running jobs.
import { sql } from 'drizzle-orm';
import { type Db, rowsOf } from './db.ts';

export interface DrainerLease {
  drainerId: string;
  /** The holding process's worker id. */
  holder: string;
  /** Record this connection's server session as the holder's (false behind a transaction pooler). */
  ownSession: boolean;
  staleSeconds: number;
}

/** Takes the identity when it is free (see above); true if taken. */
export async function takeDrainerIdentity(db: Db, lease: DrainerLease): Promise<boolean> {
  const rows = await rowsOf<{ taken: boolean }>(
    db,
    sql`INSERT INTO pgdrain.drainers AS d (drainer_id, holder, session_pid, session_started)
        SELECT ${lease.drainerId}, ${lease.holder}, a.pid, a.backend_start
          FROM (SELECT 1) one
          LEFT JOIN pg_stat_activity a ON ${lease.ownSession} AND a.pid = pg_backend_pid()
        ON CONFLICT (drainer_id) DO UPDATE
           SET holder = excluded.holder, session_pid = excluded.session_pid,
               session_started = excluded.session_started, renewed_at = now(), taken_at = now()
         WHERE d.holder = excluded.holder
            OR d.renewed_at < now() - make_interval(secs => ${lease.staleSeconds})
            OR (d.session_pid IS NOT NULL AND NOT EXISTS (
                  SELECT 1 FROM pg_stat_activity s WHERE s.pid = d.session_pid AND s.backend_start = d.session_started))
        RETURNING true AS taken`,
  );
  return rows.length > 0;
}

/** Renews the holder's row; false when another process has taken it meanwhile (or it is gone).
 * `ownSession`: record this connection's session as the holder's again (after a reconnect). */
export async function renewDrainerIdentity(db: Db, lease: DrainerLease): Promise<boolean> {
  const rows = await rowsOf<{ renewed: boolean }>(
    db,
    sql`UPDATE pgdrain.drainers d
           SET renewed_at = now(),
               session_pid = a.pid, session_started = a.backend_start
          FROM (SELECT 1) one
          LEFT JOIN pg_stat_activity a ON ${lease.ownSession} AND a.pid = pg_backend_pid()
         WHERE d.drainer_id = ${lease.drainerId} AND d.holder = ${lease.holder}
        RETURNING true AS renewed`,
  );
  return rows.length > 0;
}

/** When the identity's current holder last renewed it, and whether it holds a session of its own;
 * null when nobody holds it. */
export async function drainerIdentityHolder(
  db: Db,
  drainerId: string,
): Promise<{ holder: string; renewedAt: Date; ownSession: boolean } | null> {
  const [row] = await rowsOf<{ holder: string; renewed_at: Date; own_session: boolean }>(
    db,
    sql`SELECT holder, renewed_at, session_pid IS NOT NULL AS own_session
          FROM pgdrain.drainers WHERE drainer_id = ${drainerId}`,
  );
  return row ? { holder: row.holder, renewedAt: new Date(row.renewed_at), ownSession: row.own_session } : null;
}

/** Gives the identity up (a graceful stop): the next process of this name takes it at once. */
export async function releaseDrainerIdentity(db: Db, lease: Pick<DrainerLease, 'drainerId' | 'holder'>): Promise<void> {
  await rowsOf(
    db,
    sql`DELETE FROM pgdrain.drainers WHERE drainer_id = ${lease.drainerId} AND holder = ${lease.holder}`,
  );
}
