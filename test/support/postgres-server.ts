// The run's PostgreSQL: DATABASE_URL when set, else an embedded PostgreSQL 18 in a temp folder — one
// server for the whole run, whichever projects ask for it (the Node tests and the Worker tests share
// it). Migrated databases are copies of one template migrated once (CREATE DATABASE … TEMPLATE: a
// file copy, a few milliseconds), not each migrated anew.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';

export interface TestServer {
  adminUrl: string;
  /** A database migrated once, to copy (never to connect to: a copy needs its template idle). */
  template: string;
  /** Stops the server once every project that asked for it has let it go. */
  stop: () => Promise<void>;
}

let shared: { server: Promise<Omit<TestServer, 'stop'> & { stop: () => Promise<void> }>; users: number } | undefined;

/** The run's server (started at the first call, stopped after the last user's stop()). */
export async function startTestServer(): Promise<TestServer> {
  shared ??= { server: startServer(), users: 0 };
  shared.users++;
  const server = await shared.server;
  let stopped = false;
  return {
    adminUrl: server.adminUrl,
    template: server.template,
    stop: async () => {
      if (stopped || !shared) return;
      stopped = true;
      if (--shared.users > 0) return;
      shared = undefined;
      await server.stop();
    },
  };
}

async function startServer(): Promise<Omit<TestServer, 'stop'> & { stop: () => Promise<void> }> {
  let adminUrl: string;
  let stopServer = async () => {};
  if (process.env.DATABASE_URL) adminUrl = process.env.DATABASE_URL;
  else {
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
    adminUrl = server.url;
    stopServer = async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    };
  }
  const template = `pgdrain_template_${process.pid}`;
  await createDatabase(adminUrl, template);
  await migrateDatabase(databaseUrl(adminUrl, template));
  return {
    adminUrl,
    template,
    stop: async () => {
      await dropDatabase(adminUrl, template).catch(() => {});
      await stopServer();
    },
  };
}

/** `name` on the admin URL's server. */
export function databaseUrl(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function admin<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** A new database `name` (dropped first if it is there): empty, or a copy of `template`. */
export function createDatabase(adminUrl: string, name: string, template?: string): Promise<string> {
  return admin(adminUrl, async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    await client.query(
      `CREATE DATABASE ${pg.escapeIdentifier(name)}${template ? ` TEMPLATE ${pg.escapeIdentifier(template)}` : ''}`,
    );
    return databaseUrl(adminUrl, name);
  });
}

export function dropDatabase(adminUrl: string, name: string): Promise<void> {
  return admin(adminUrl, async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
  });
}
