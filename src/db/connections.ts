// One shape of "a database" for every runtime: the sidecar's pools (src/sidecar/database.ts) and
// the Worker's per-invocation connections (src/worker/database.ts) are each a QueueDatabase, and the
// conformance suite (test/conformance/) runs the queue's behaviour on the runtimes' own ones.
import type { Db } from '../queries/db.ts';

/** A connection of its own, for one transactional handler (or the Worker's housekeeping). */
export interface TransactionConnection {
  db: Db;
  /** Back to its pool; `destroy`: close it instead (the server rolls back what it had open). */
  giveBack(destroy: boolean): void;
}

/** Opens a TransactionConnection (each runtime has its own pool of them). */
export type OpenTransactionConnection = () => Promise<TransactionConnection>;

export interface QueueDatabase {
  /** Enqueues, reads and the API's writes: fully durable commits. */
  db: Db;
  /** The drain's claims, settlements, renewals and housekeeping (the sidecar's commit
   * asynchronously: one lost in a crash only runs a job again); the Worker's are `db`. */
  drainDb: Db;
  /** Connections for transactional handlers. */
  transactions: OpenTransactionConnection;
  /** Closes every connection; never rejects. */
  close(): Promise<void>;
}

/** A pool of either driver (pg, Neon: both are pg-pool). */
export interface ClientPool {
  on(event: 'connect', listener: (client: { on(event: 'error', listener: (error: Error) => void): unknown }) => void): unknown;
}

/**
 * Listens for errors on every client of `pool`, also while it is checked out. pg-pool listens only
 * on idle clients: a checked-out one (a Drizzle transaction, a transactional handler's connection)
 * whose connection drops emits an `error` no one hears, which ends the process — found by the chaos
 * suite, a workflow's transactional step in flight at a SIGTERM. The queries on it fail with the
 * error all the same, and the pool discards it when it is released (it is no longer queryable).
 */
export function hearCheckedOutErrors<Pool extends ClientPool>(pool: Pool): Pool {
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}
