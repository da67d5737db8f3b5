// A fresh, migrated database per test file (or per test) on the run's PostgreSQL server: a copy of
// the template the run migrated once (postgres-server.ts).
import { randomBytes } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { inject } from 'vitest';
import type { Db } from '../../src/queries/index.ts';
import { createDatabase, dropDatabase } from './postgres-server.ts';

export interface TestDatabase {
  /** Through the run's pooler when there is one (PGDRAIN_TEST_POOLER). */
  url: string;
  /** Straight to the server, whatever stands in front of it. */
  directUrl: string;
  /** A transaction-mode pooler stands between `url` and the server. */
  throughPooler: boolean;
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
  const url = new URL(
    await createDatabase(admin, name, options.migrate === false ? undefined : inject('templateDatabase')),
  );
  const directUrl = url.toString();
  // Through the run's PgBouncer when there is one (global-setup.ts).
  const poolerPort = inject('poolerPort');
  if (poolerPort) {
    url.hostname = '127.0.0.1';
    url.port = String(poolerPort);
  }

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
    directUrl,
    throughPooler: Boolean(poolerPort),
    pool: main.pool,
    db: main.db,
    query: async (text, values) => (await main.pool.query(text, values)).rows,
    connect,
    close: async () => {
      await Promise.all(pools.map((p) => p.end()));
      await dropDatabase(admin, name);
    },
  };
}
