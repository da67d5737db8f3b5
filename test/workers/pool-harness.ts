// The queue-behaviour suite's harness for a driver inside workerd, given how to open its pools and
// clients: the Neon driver (neon-harness.ts) and node-postgres through Hyperdrive
// (hyperdrive-harness.ts) differ only in those.
import type { Db } from '../../src/queries/index.ts';
import { type Harness, listenOn, type NotifyingClient } from '../conformance/queue-behaviour.ts';

export interface PoolLike<C> {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  connect(): Promise<C>;
  end(): Promise<void>;
}

export async function poolHarness<C extends { release(destroy?: boolean): void }, P extends PoolLike<C>>(driver: {
  /** A pool of `max` connections, its error listener attached. */
  pool(max: number): P;
  db(pool: P): Db;
  /** A database on one client taken from a pool (a transactional handler's connection). */
  clientDb(client: C): Db;
  /** A client of its own, connected, for LISTEN. */
  client(): Promise<NotifyingClient>;
}): Promise<Harness> {
  const pools: P[] = [];
  const open = (max: number) => {
    const pool = driver.pool(max);
    pools.push(pool);
    return { pool, db: driver.db(pool) };
  };
  const main = open(3);
  let transactionPool: P | undefined;
  return {
    db: main.db,
    query: async (text, values) => (await main.pool.query(text, values)).rows,
    connect: async () => open(1).db,
    listen: async (channel) => listenOn(await driver.client(), channel),
    transactions: async () => {
      transactionPool ??= open(3).pool;
      const client = await transactionPool.connect();
      return { db: driver.clientDb(client), release: (destroy) => client.release(destroy) };
    },
    close: async () => {
      await Promise.all(pools.splice(0).map((p) => p.end()));
    },
  };
}
