// The queue-behaviour suite's harness on the Neon serverless driver, inside workerd.
import { Client, Pool } from '@neondatabase/serverless';
import { drizzle } from 'drizzle-orm/neon-serverless';
import { env } from 'cloudflare:test';
import { openWorkerDatabase, useLocalProxy } from '../../src/worker/database.ts';
import type { Db } from '../../src/queries/index.ts';
import type { Harness } from '../support/harness.ts';
import { poolHarness } from './pool-harness.ts';

export function neonPool(url: string, max = 2): Pool {
  useLocalProxy(env.NEON_WS_PROXY);
  const pool = new Pool({ connectionString: url, max });
  pool.on('error', () => {}); // ending a pool makes idle clients report a lost connection
  return pool;
}

export function createNeonHarness(url: string): Promise<Harness> {
  return poolHarness({
    pool: (max) => neonPool(url, max),
    db: (pool) => drizzle({ client: pool }) as unknown as Db,
    database: () => openWorkerDatabase({ DATABASE_URL: url, NEON_WS_PROXY: env.NEON_WS_PROXY }),
    client: async () => {
      useLocalProxy(env.NEON_WS_PROXY);
      const client = new Client(url);
      client.on('error', () => {});
      await client.connect();
      return client;
    },
  });
}
