// One shape of "a database" for every runtime: the sidecar's pools (src/sidecar/database.ts) and
// the Worker's per-invocation connections (src/worker/database.ts) are each a QueueDatabase, and the
// conformance suite (test/conformance/) runs the queue's behaviour on the runtimes' own ones.
import type { Db } from '../queries/db.ts';

/** A connection of its own, for one transactional handler (or the Worker's housekeeping). */
export interface TransactionConnection {
  db: Db;
  /** Back to its pool; `destroy`: close it instead (the server rolls back what it had open). */
  giveBack(destroy: boolean): void;
  /** The error the server ended the connection with while it was out (a FATAL such as
   * idle_in_transaction_session_timeout's), if it did: the reason a handler's transaction failed. */
  endedWith?(): unknown;
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

/** A pool of either driver (pg, Neon: both are pg-pool), as far as guardPool() touches it. */
export interface ClientPool {
  on(event: 'connect', listener: (client: GuardedClient) => void): unknown;
  connect(): Promise<unknown>;
}

interface GuardedClient {
  on(event: 'error', listener: (error: Error) => void): unknown;
  query(...args: unknown[]): unknown;
  release(error?: Error | boolean): void;
}

/**
 * Makes a pool safe to check clients out of when connections drop (a server restart, a network cut):
 *
 * - Errors are heard on every client, also while it is checked out. pg-pool listens only on idle
 *   clients: a checked-out one whose connection drops emits an `error` no one hears, which ends the
 *   process (found by the chaos suite: a workflow's transactional step in flight at a SIGTERM). The
 *   queries on it fail with the error all the same, and the pool discards it on release.
 * - A client whose first query fails goes back to the pool at once, destroyed. Drizzle's
 *   transaction on a pool (both drivers) sends `begin` before its try/finally: when `begin` fails
 *   on a client whose connection had just dropped, it never releases the client, and the pool's
 *   end() then waits for it for ever (found by the chaos suite: a sidecar that never exited after
 *   SIGTERM). A later release of that checkout does nothing.
 *
 * Only checkouts without a callback are touched: pg-pool's own query() checks out with one and
 * releases its client itself.
 */
export function guardPool<Pool extends ClientPool>(pool: Pool): Pool {
  pool.on('connect', (client) => client.on('error', () => {}));
  const connect = pool.connect.bind(pool) as (callback?: unknown) => Promise<unknown>;
  (pool as { connect: unknown }).connect = (callback?: unknown) =>
    callback ? connect(callback) : connect().then((client) => releasedIfFirstQueryFails(client as GuardedClient));
  return pool;
}

function releasedIfFirstQueryFails<Client extends GuardedClient>(client: Client): Client {
  const release = client.release;
  const query = client.query;
  let released = false;
  client.release = (error?: Error | boolean) => {
    if (released) return;
    released = true;
    release.call(client, error);
  };
  client.query = (...args: unknown[]) => {
    client.query = query;
    const result = query.apply(client, args);
    if (result instanceof Promise) result.catch((error: Error) => client.release(error));
    return result;
  };
  return client;
}
