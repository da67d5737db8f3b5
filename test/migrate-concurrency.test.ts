// Any number of processes may migrate one database at once — replicas that start together — on a
// fresh database and on the oldest schema a release left: one migrates, the others wait for it and
// find the work done; none fails, none deadlocks (CREATE INDEX CONCURRENTLY waits for every older
// snapshot, and a waiter that held one while it waited for the lock deadlocked with the migrator).
// The lock cannot outlive its holder (kill -9), a DBA's statement_timeout does not fail a waiter, a
// wait says once who it waits for and is bounded, and a sidecar waiting for another's migration
// stops on the first SIGTERM.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrationsFolder, MigrationWaitError, migrateDatabase } from '../src/db/migrate.ts';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { QUICK_DRIZZLE } from './support/sidecar-process.ts';
import { WAVE5, databaseShippedBy } from './support/shipped-migrations.ts';
import { until } from './support/time.ts';

const CLI = fileURLToPath(new URL('../src/entry/cli.ts', import.meta.url));
const MIGRATION_LOCK_KEY = 7477853620;
const MIGRATIONS = readMigrationFiles({ migrationsFolder: migrationsFolder() }).length;

const opened: TestDatabase[] = [];
afterAll(async () => {
  await Promise.all(opened.map((t) => t.close()));
});
async function freshDatabase(): Promise<TestDatabase> {
  const t = await createTestDatabase({ migrate: false });
  opened.push(t);
  return t;
}

/** What a database's schema holds, to compare a migrated one with another. */
async function schemaShape(t: TestDatabase) {
  const [shape] = await t.query(`
    SELECT (SELECT count(*)::int FROM pgdrain.migrations) AS migrations,
           (SELECT count(*)::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'pgdrain') AS relations,
           (SELECT count(*)::int FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgdrain' AND NOT i.indisvalid) AS invalid,
           (SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = 'pgdrain'::regnamespace) AS functions`);
  return shape!;
}

/** Migration locks held now on this database (none once every migrate has ended). */
async function locksHeld(t: TestDatabase): Promise<number> {
  const [row] = await t.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1::bigint::oid
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [MIGRATION_LOCK_KEY % 2 ** 32],
  );
  return row!.n;
}

/** Four migrates at once, each on its own connections as four processes have: every one resolves;
 * one applied the migrations, the others found them applied. */
async function fourAtOnce(t: TestDatabase, expectApplied: number) {
  const waited: string[] = [];
  const reports = await Promise.all(
    Array.from({ length: 4 }, () =>
      migrateDatabase(t.url, { onWaiting: (holder) => waited.push(holder.applicationName ?? '?') }),
    ),
  );
  const applied = reports.map((r) => r.migrations.length).sort((a, b) => b - a);
  expect(applied).toEqual([expectApplied, 0, 0, 0]);
  expect(reports.filter((r) => r.functions.created.length > 0)).toHaveLength(1);
  expect(await locksHeld(t)).toBe(0);
  return waited;
}

describe('migrations that any number of processes may run at once', () => {
  it('four migrates on a fresh database, 20 times in a row: one migrates, three wait and find it done', async () => {
    let waitedInAll = 0;
    let reference: Record<string, unknown> | undefined;
    for (let round = 0; round < 20; round++) {
      const t = await freshDatabase();
      const waited = await fourAtOnce(t, MIGRATIONS);
      // Those that waited said who held the lock (the migrating connection's name), once each.
      for (const holder of waited) expect(holder).toMatch(/^pgdrain-migrate-lock$|^\?$/);
      waitedInAll += waited.length;
      const shape = await schemaShape(t);
      expect(shape).toMatchObject({ migrations: MIGRATIONS, invalid: 0 });
      reference ??= shape;
      expect(shape).toEqual(reference);
      await t.close();
      opened.splice(opened.indexOf(t), 1);
    }
    // Each round, three of the four came while the first held the lock (or after it was done).
    expect(waitedInAll).toBeGreaterThan(0);
  }, 240_000);

  it('four migrates at once from the schema of the oldest migration the last release shipped', async () => {
    const t = await databaseShippedBy(WAVE5, '0001');
    opened.push(t);
    await fourAtOnce(t, MIGRATIONS - 1);
    expect(await schemaShape(t)).toMatchObject({ migrations: MIGRATIONS, invalid: 0 });
  }, 120_000);

  it("a DBA's statement_timeout and idle-in-transaction timeout fail neither a waiter nor the migration", async () => {
    const t = await freshDatabase();
    const name = new URL(t.url).pathname.slice(1);
    await t.query(`ALTER DATABASE ${name} SET statement_timeout = '300ms'`);
    await t.query(`ALTER DATABASE ${name} SET idle_in_transaction_session_timeout = '200ms'`);
    const reports = await Promise.all(Array.from({ length: 3 }, () => migrateDatabase(t.url)));
    expect(reports.map((r) => r.migrations.length).sort((a, b) => b - a)).toEqual([MIGRATIONS, 0, 0]);
    expect(await schemaShape(t)).toMatchObject({ migrations: MIGRATIONS, invalid: 0 });
  }, 120_000);

  it('a wait says who holds the lock and ends with MigrationWaitError after maxWaitSeconds', async () => {
    const t = await freshDatabase();
    const holder = new pg.Client({ connectionString: t.url, application_name: 'a stuck deploy' });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      const told: unknown[] = [];
      const error = await migrateDatabase(t.url, { maxWaitSeconds: 1, onWaiting: (h) => told.push(h) }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(MigrationWaitError);
      expect((error as Error).message).toMatch(
        /another process has held pgdrain's migration lock for more than 1 s \(a stuck deploy, backend pid \d+, since /,
      );
      expect(told).toEqual([{ pid: expect.any(Number), applicationName: 'a stuck deploy', since: expect.any(Date) }]);
      // Nothing was written while it waited.
      expect(await t.query(`SELECT 1 FROM pg_namespace WHERE nspname = 'pgdrain'`)).toEqual([]);
    } finally {
      await holder.end();
    }
    await migrateDatabase(t.url);
  });
});

describe('migrating processes', () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  /** `pgdrain <args>` as a process; its output, and how it ended. */
  function pgdrain(args: string[], env: Record<string, string>) {
    const child = spawn(process.execPath, ['--import', QUICK_DRIZZLE, CLI, ...args], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    return { child, output: () => output, exited };
  }

  it('four `pgdrain migrate` processes started together on a fresh database all exit 0', async () => {
    const t = await freshDatabase();
    const runs = Array.from({ length: 4 }, () => pgdrain(['migrate'], { DATABASE_URL: t.url }));
    const ends = await Promise.all(runs.map((r) => r.exited));
    for (const [i, end] of ends.entries()) expect(end, runs[i]!.output()).toEqual({ code: 0, signal: null });
    for (const run of runs) expect(run.output()).toMatch(/(is|was) up to date \(schema pgdrain\)/);
    expect(await schemaShape(t)).toMatchObject({ migrations: MIGRATIONS, invalid: 0 });
    expect(await locksHeld(t)).toBe(0);
  }, 120_000);

  it('a migrate killed with -9 while it holds the lock leaves nothing held: the next migrate finishes', async () => {
    // The last release's schema, and a long transaction reading the jobs table: the next migration
    // (which alters it) steps back and tries again, holding the migration lock meanwhile.
    const t = await databaseShippedBy(WAVE5);
    opened.push(t);
    const reader = new pg.Client({ connectionString: t.url });
    await reader.connect();
    try {
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM pgdrain.jobs');
      const killed = pgdrain(['migrate'], { DATABASE_URL: t.url });
      await until(killed.output, (o) => /waits for a table another transaction holds/.test(o), 30_000, 'the wait');
      expect(await locksHeld(t)).toBe(1);
      killed.child.kill('SIGKILL');
      await killed.exited;
      // Its connections end with it, and the lock with them.
      await until(
        () => locksHeld(t),
        (n) => n === 0,
        10_000,
        'the lock to go',
      );
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
    }
    const next = pgdrain(['migrate'], { DATABASE_URL: t.url });
    expect(await next.exited, next.output()).toEqual({ code: 0, signal: null });
    expect(await schemaShape(t)).toMatchObject({ migrations: MIGRATIONS, invalid: 0 });
  }, 120_000);

  it("a sidecar waiting for another's migration says so once and stops on the first SIGTERM", async () => {
    const t = await freshDatabase();
    const holder = new pg.Client({ connectionString: t.url, application_name: 'another replica' });
    await holder.connect();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-migrate-wait-'));
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      const sidecar = pgdrain(['start'], {
        DATABASE_URL: t.url,
        PORT: '0',
        PGDRAIN_DATA_DIR: dataDir,
        API_TOKEN: 'migrate-wait-token',
        LOG_LEVEL: 'info',
        LOG_FORMAT: 'json',
      });
      await until(sidecar.output, (o) => /another process is migrating/.test(o), 30_000, 'the wait to be logged');
      // Still waiting a while later, having said it once.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      expect(sidecar.output().match(/another process is migrating/g)).toHaveLength(1);
      expect(sidecar.output()).toMatch(/another replica, backend pid \d+/);
      const signalled = performance.now();
      sidecar.child.kill('SIGTERM');
      expect(await sidecar.exited, sidecar.output()).toEqual({ code: 0, signal: null });
      expect(performance.now() - signalled).toBeLessThan(15_000);
      expect(sidecar.output()).toMatch(/SIGTERM while starting: stopped before it had started/);
      // It had not migrated anything, and holds nothing.
      expect(await t.query(`SELECT 1 FROM pg_namespace WHERE nspname = 'pgdrain'`)).toEqual([]);
      expect(await locksHeld(t)).toBe(1); // the holder's own
    } finally {
      await holder.end();
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
