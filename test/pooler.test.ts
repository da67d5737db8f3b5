// `pgdrain start` through a real PgBouncer (Debian's) in transaction mode with its default settings —
// how most hosted PostgreSQL is reached. Before wave 6 the sidecar did not start through it (a
// startup parameter refused), POST /jobs, enqueue() and the CLI failed on a named statement, the
// log claimed NOTIFY wake-ups that never came, and a recycled server session dropped the DRAINER_ID
// protection. Each of those is tried here on real processes. CI installs PgBouncer and requires
// these tests (PGDRAIN_POOLER_TESTS=required); elsewhere they skip when it is not installed.
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { migrateDatabase } from '../src/db/migrate.ts';
import { enqueue } from '../src/entry/index.ts';
import type { Db } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type PgBouncer, havePgBouncer, startPgBouncer } from './support/pgbouncer.ts';
import { QUICK_DRIZZLE, type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const required = process.env.PGDRAIN_POOLER_TESTS === 'required';
if (required && !havePgBouncer()) throw new Error('PGDRAIN_POOLER_TESTS=required, but PgBouncer is not installed');
const CLI = fileURLToPath(new URL('../src/entry/cli.ts', import.meta.url));
const TOKEN = 'pooler-test-token-0123456789';

let t: TestDatabase;
let bouncer: PgBouncer;
let pooled: string;
let dir: string;
const running: SidecarProcess[] = [];

const start = async (env: Record<string, string> = {}) => {
  const p = await startSidecarProcess({
    DATABASE_URL: pooled,
    API_TOKEN: TOKEN,
    PGDRAIN_DATA_DIR: dir,
    POLL_INTERVAL_MS: '200',
    ...env,
  });
  running.push(p);
  return p;
};
const runs = () =>
  t.query<{ job_id: string; n: number; pids: number[] }>(
    `SELECT job_id::text, count(*)::int AS n, array_agg(DISTINCT pid) AS pids FROM test_runs GROUP BY job_id`,
  );

describe.skipIf(!havePgBouncer())('through PgBouncer in transaction mode', () => {
  beforeAll(async () => {
    t = await createTestDatabase();
    bouncer = await startPgBouncer(t.directUrl);
    pooled = bouncer.through(t.directUrl);
    dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-pooler-'));
    await chmod(dir, 0o755);
  });
  afterAll(async () => {
    await bouncer?.stop();
    await t?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  afterEach(async () => {
    for (const p of running.splice(0)) {
      p.kill();
      await p.exited;
    }
    await t.query('TRUNCATE pgdrain.jobs, pgdrain.drainers').catch(() => {});
    await t.query('DROP TABLE IF EXISTS test_runs').catch(() => {});
  });

  it('the sidecar starts, says it polls, and every enqueue path works: the API, enqueue(), the CLI, SQL; each job runs once', async () => {
    const sidecar = await start();
    const log = sidecar.stdout();
    expect(log).toMatch(/"pooler":"transaction".*a transaction-mode pooler stands in front of the database/);
    expect(log).toMatch(/waking by polling only, every 200 ms: a transaction-mode pooler does not deliver NOTIFY/);
    expect(log).not.toMatch(/waking on NOTIFY/);

    const post = (body: unknown, route = '/jobs') =>
      fetch(`${sidecar.url}${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    // The API, ten at a time (before: 46 of 300 were 500 internal).
    const statuses: number[] = [];
    const work = Array.from({ length: 100 }, (_, i) => i);
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        for (let i = work.shift(); i !== undefined; i = work.shift())
          statuses.push((await post({ kind: 'record', payload: {} })).status);
      }),
    );
    expect(statuses.filter((s) => s !== 201)).toEqual([]);
    expect(
      (
        await post(
          {
            jobs: [
              { kind: 'record', payload: {} },
              { kind: 'record', payload: {} },
            ],
          },
          '/jobs/batch',
        )
      ).status,
    ).toBe(201);

    // The library's enqueue() on the application's own pool through the pooler, without a setting
    // (before: 248 of 300 failed on "prepared statement pgdrain_insert_job already exists").
    const appPool = new pg.Pool({ connectionString: pooled, max: 10 });
    const appDb = drizzle({ client: appPool }) as unknown as Db;
    try {
      const failures: string[] = [];
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          for (let i = 0; i < 10; i++)
            await enqueue(appDb, { kind: 'record', payload: {} }).catch((e: Error) => failures.push(e.message));
        }),
      );
      expect(failures).toEqual([]);
    } finally {
      await appPool.end();
    }

    // The CLI, a process per job (before: 5 of 5 failed).
    for (let i = 0; i < 3; i++) {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ['--import', QUICK_DRIZZLE, CLI, 'enqueue', 'record', '{}'],
        { env: { PATH: process.env.PATH ?? '', DATABASE_URL: pooled } },
      );
      expect(stdout.trim()).toMatch(/^\d+$/);
    }
    // SQL through the pooler.
    const sqlClient = new pg.Client({ connectionString: pooled });
    await sqlClient.connect();
    await sqlClient.query(`SELECT pgdrain.enqueue('record', '{}')`);
    await sqlClient.end();

    const total = 100 + 2 + 100 + 3 + 1;
    await until(runs, (r) => r.length === total, 30_000, 'every job to run');
    await until(
      async () => (await t.query<{ n: number }>('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n,
      (n) => n === 0,
      15_000,
      'every job to complete',
    );
    expect((await runs()).filter((r) => r.n !== 1)).toEqual([]);
    expect(sidecar.stdout()).not.toMatch(/"level":(50|60)/);
  });

  it('four migrates at once through the pooler: one brings an empty database up to date, the others wait and find nothing to do', async () => {
    const fresh = await createTestDatabase({ migrate: false });
    try {
      const through = bouncer.through(fresh.directUrl);
      // The migration lock is a transaction's: the pooler keeps it for its transaction's life.
      const reports = await Promise.all(Array.from({ length: 4 }, () => migrateDatabase(through)));
      const applied = reports.map((r) => r.migrations.length).sort((a, b) => b - a);
      expect(applied[0]).toBeGreaterThan(20);
      expect(applied.slice(1)).toEqual([0, 0, 0]);
      expect((await migrateDatabase(through)).migrations).toEqual([]);
      expect(await fresh.query(`SELECT to_regclass('pgdrain.drainers')::text AS t`)).toEqual([
        { t: 'pgdrain.drainers' },
      ]);
    } finally {
      await fresh.close();
    }
  });

  it('LISTEN_DATABASE_URL straight to the server: wakes on NOTIFY while everything else goes through the pooler', async () => {
    const sidecar = await start({ LISTEN_DATABASE_URL: t.directUrl });
    await sidecar.waitForOutput(/listener up: waking on NOTIFY/);
    await t.query(`SELECT pgdrain.enqueue('record', '{}')`);
    await until(runs, (r) => r.length === 1, 15_000, 'the job to run');
  });

  it('a listener that cannot hear its own test NOTIFY says so and polls, and never claims a wake-up path', async () => {
    // Told the pooler keeps sessions, it listens through it: PgBouncer drops the notifications.
    const sidecar = await start({ DATABASE_POOLER: 'session' });
    await sidecar.waitForOutput(/did not hear its own test NOTIFY.*polling only, every 200 ms/, 15_000);
    expect(sidecar.stdout()).not.toMatch(/listener up: waking on NOTIFY/);
    await t.query(`SELECT pgdrain.enqueue('record', '{}')`);
    await until(runs, (r) => r.length === 1, 15_000, 'the job to run by the poll');
  });

  it('DRAINER_ID holds through server sessions the pooler recycles: a second live process takes nothing from the first', async () => {
    const first = await start({ DRAINER_ID: 'pooled-name' });
    await t.query(`SELECT pgdrain.enqueue('record', '{"ms": 60000}') FROM generate_series(1, 3)`);
    await until(runs, (r) => r.length === 3, 15_000, 'the first process running all three');
    // Every server session behind the pooler ends (a recycle, a failover): a session lock held on one
    // of them would be gone now.
    await t.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    const before = await t.query(`SELECT id, locked_by FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`);
    expect(before).toHaveLength(3);
    const second = await start({ DRAINER_ID: 'pooled-name' });
    expect(second.stdout()).toMatch(/another live process holds this DRAINER_ID/);
    expect(second.stdout()).not.toMatch(/released the jobs an earlier process/);
    expect(await t.query(`SELECT id, locked_by FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`)).toEqual(
      before,
    );
    expect((await runs()).every((r) => r.n === 1 && r.pids[0] === first.child.pid)).toBe(true);
  });

  it('kill -9 through the pooler, then a restart under the same DRAINER_ID: what the killed one held runs again once its lease lapses', async () => {
    const first = await start({ DRAINER_ID: 'restarted-name' });
    await t.query(`SELECT pgdrain.enqueue('record', '{"ms": 60000}') FROM generate_series(1, 3)`);
    await until(runs, (r) => r.length === 3, 15_000, 'the first process running all three');
    first.kill();
    await first.exited;
    const second = await start({ DRAINER_ID: 'restarted-name' });
    expect(second.stdout()).toMatch(/holds it through a pooler, which cannot say whether it is alive/);
    expect(second.stdout()).toMatch(/released the jobs an earlier process of this drainer held/);
    await until(
      async () => (await runs()).filter((r) => r.pids.includes(second.child.pid!)).length,
      (n) => n === 3,
      10_000,
      'the second process running the three again',
    );
  });
});
