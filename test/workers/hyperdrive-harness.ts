// The queue-behaviour suite's harness on the Worker's Hyperdrive path: node-postgres inside workerd,
// over Cloudflare's TCP sockets, through a local Hyperdrive binding in front of the test PostgreSQL.
// Locally Hyperdrive is a plain TCP proxy, so LISTEN works here for the suite's NOTIFY check; the
// Worker itself never listens (real Hyperdrive pools in transaction mode).
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Db } from '../../src/queries/index.ts';
import type { Harness } from '../conformance/queue-behaviour.ts';

export async function createHyperdriveHarness(binding: { connectionString: string }): Promise<Harness> {
  const pools: pg.Pool[] = [];
  const open = (max: number) => {
    const pool = new pg.Pool({ connectionString: binding.connectionString, max });
    // Mandatory on this path: pg-cloudflare reports every socket closed by end() as an error.
    pool.on('error', () => {});
    pools.push(pool);
    return { pool, db: drizzle({ client: pool }) as unknown as Db };
  };
  const main = open(3);
  return {
    db: main.db,
    query: async (text, values) => (await main.pool.query(text, values as unknown[])).rows,
    connect: async () => open(1).db,
    listen: async (channel) => {
      const client = new pg.Client({ connectionString: binding.connectionString });
      client.on('error', () => {});
      await client.connect();
      const received: string[] = [];
      client.on('notification', (n) => {
        if (n.channel === channel) received.push(n.payload ?? '');
      });
      await client.query(`LISTEN ${channel}`);
      return { received, close: () => client.end() };
    },
    close: async () => {
      await Promise.all(pools.splice(0).map((p) => p.end()));
    },
  };
}
