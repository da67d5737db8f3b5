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

/** What a pooled client of either driver (pg, Neon) offers while it is checked out. */
export interface PooledClient {
  on(event: 'error', listener: (error: Error) => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
  release(destroy?: boolean): void;
}

/**
 * A client checked out of its pool as a TransactionConnection. The pools listen for errors only on
 * idle clients: a checked-out one whose connection drops between two queries (a server restart, a
 * network cut) emits an `error` no one hears, which ends the process. Listened to here while it is
 * out; one that erred goes back destroyed.
 */
export function checkedOut<Client extends PooledClient>(client: Client, wrap: (client: Client) => Db): TransactionConnection {
  let broken = false;
  const onError = () => (broken = true);
  client.on('error', onError);
  return {
    db: wrap(client),
    giveBack: (destroy) => {
      client.removeListener('error', onError);
      client.release(destroy || broken);
    },
  };
}
