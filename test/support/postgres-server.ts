// The run's PostgreSQL: DATABASE_URL when set, else an embedded PostgreSQL 18 in a temp folder.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';

export async function startTestServer(): Promise<{ adminUrl: string; stop: () => Promise<void> }> {
  if (process.env.DATABASE_URL) return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-test-'));
  // As root, the server runs as the `postgres` user, which must be able to reach its data folder.
  await chmod(dir, 0o755);
  const server = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    password: 'test-password',
    // Durability is not under test here; speed is welcome. pg_stat_statements for the tests that
    // read what statements cost (test/stock-server.test.ts).
    settings: {
      fsync: 'off',
      synchronous_commit: 'off',
      full_page_writes: 'off',
      max_connections: 300,
      shared_preload_libraries: 'pg_stat_statements',
    },
  });
  return {
    adminUrl: server.url,
    stop: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** CREATE DATABASE + migrations; returns its URL. */
export async function createMigratedDatabase(adminUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  await migrateDatabase(url.toString());
  return url.toString();
}
