// The queue-behaviour suite's harness on the Neon serverless driver, inside workerd.
import { Client, Pool } from '@neondatabase/serverless';
import { drizzle } from 'drizzle-orm/neon-serverless';
import { env } from 'cloudflare:test';
import { useLocalProxy } from '../../src/worker/database.ts';
import type { Db } from '../../src/queries/index.ts';
import type { Harness } from '../conformance/queue-behaviour.ts';

export function neonPool(url: string, max = 2): Pool {
  useLocalProxy(env.NEON_WS_PROXY);
  const pool = new Pool({ connectionString: url, max });
  pool.on('error', () => {}); // ending a pool makes idle clients report a lost connection
  return pool;
}

export async function createNeonHarness(url: string): Promise<Harness> {
  const pools: Pool[] = [];
  const open = (max: number) => {
    const pool = neonPool(url, max);
    pools.push(pool);
    return { pool, db: drizzle({ client: pool }) as unknown as Db };
  };
  const main = open(3);
  return {
    db: main.db,
    query: async (text, values) => (await main.pool.query(text, values as unknown[])).rows,
    connect: async () => open(1).db,
    listen: async (channel) => {
      useLocalProxy(env.NEON_WS_PROXY);
      const client = new Client(url);
      client.on('error', () => {});
      await client.connect();
      const received: string[] = [];
      client.on('notification', (n: { channel: string; payload?: string }) => {
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
