// The queue-behaviour suite's harness on the Worker's Hyperdrive path: node-postgres inside workerd,
// over Cloudflare's TCP sockets, through a local Hyperdrive binding in front of the test PostgreSQL.
// Locally Hyperdrive is a plain TCP proxy, so LISTEN works here for the suite's NOTIFY check; the
// Worker itself never listens (real Hyperdrive pools in transaction mode).
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Db } from '../../src/queries/index.ts';
import { openWorkerDatabase } from '../../src/worker/database.ts';
import type { Harness } from '../support/harness.ts';
import { poolHarness } from './pool-harness.ts';

export function createHyperdriveHarness(binding: { connectionString: string }): Promise<Harness> {
  return poolHarness({
    pool: (max) => {
      const pool = new pg.Pool({ connectionString: binding.connectionString, max });
      // Mandatory on this path: pg-cloudflare reports every socket closed by end() as an error.
      pool.on('error', () => {});
      return pool;
    },
    db: (pool) => drizzle({ client: pool }) as unknown as Db,
    database: () => openWorkerDatabase({ HYPERDRIVE: binding }),
    client: async () => {
      const client = new pg.Client({ connectionString: binding.connectionString });
      client.on('error', () => {});
      await client.connect();
      return client;
    },
  });
}
