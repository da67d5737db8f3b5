// A fresh, migrated database per test file on the run's PostgreSQL server.
import { randomBytes } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { inject } from 'vitest';
import { migrateDatabase } from '../../src/db/migrate.ts';
import type { Db } from '../../src/queries/index.ts';

export interface TestDatabase {
  url: string;
  pool: pg.Pool;
  db: Db;
  /** Raw SQL for assertions (tests may look at rows any way they like). */
  query<T extends pg.QueryResultRow = Record<string, any>>(text: string, values?: unknown[]): Promise<T[]>;
  /** A new drizzle database on its own pool, for tests that need separate connections. */
  connect(max?: number): { db: Db; pool: pg.Pool };
  close(): Promise<void>;
}

/** `migrate: false` leaves the database empty (for tests of the migrations themselves). */
export async function createTestDatabase(options: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const admin = inject('adminDatabaseUrl');
  const name = `pgdrain_test_${randomBytes(6).toString('hex')}`;
  const adminClient = new pg.Client({ connectionString: admin });
  await adminClient.connect();
  await adminClient.query(`CREATE DATABASE ${name}`);
  await adminClient.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  if (options.migrate !== false) await migrateDatabase(url.toString());

  const pools: pg.Pool[] = [];
  const connect = (max = 10) => {
    const pool = new pg.Pool({ connectionString: url.toString(), max });
    pool.on('error', () => {});
    pools.push(pool);
    return { pool, db: drizzle({ client: pool }) as unknown as Db };
  };
  const main = connect();
  return {
    url: url.toString(),
    pool: main.pool,
    db: main.db,
    query: async (text, values) => (await main.pool.query(text, values)).rows,
    connect,
    close: async () => {
      await Promise.all(pools.map((p) => p.end()));
      const c = new pg.Client({ connectionString: admin });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}
