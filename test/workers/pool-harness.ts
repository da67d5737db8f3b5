// The queue-behaviour suite's harness for a driver inside workerd, given how to open its pools and
// clients: the Neon driver (neon-harness.ts) and node-postgres through Hyperdrive
// (hyperdrive-harness.ts) differ only in those.
import type { QueueDatabase } from '../../src/db/connections.ts';
import type { Db } from '../../src/queries/index.ts';
import { type Harness, listenOn, type NotifyingClient } from '../support/harness.ts';

export interface PoolLike<C> {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  connect(): Promise<C>;
  end(): Promise<void>;
}

export async function poolHarness<C extends { release(destroy?: boolean): void }, P extends PoolLike<C>>(driver: {
  /** A pool of `max` connections, its error listener attached. */
  pool(max: number): P;
  db(pool: P): Db;
  /** A client of its own, connected, for LISTEN. */
  client(): Promise<NotifyingClient>;
  /** The Worker's own database on this path (src/worker/database.ts), as an invocation opens it. */
  database(): QueueDatabase;
}): Promise<Harness> {
  const pools: P[] = [];
  const open = (max: number) => {
    const pool = driver.pool(max);
    pools.push(pool);
    return { pool, db: driver.db(pool) };
  };
  const main = open(3);
  const database = driver.database();
  return {
    db: database.db,
    query: async (text, values) => (await main.pool.query(text, values)).rows,
    connect: async () => open(1).db,
    listen: async (channel) => listenOn(await driver.client(), channel),
    transactions: database.transactions,
    close: async () => {
      await database.close();
      await Promise.all(pools.splice(0).map((p) => p.end()));
    },
  };
}
