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
