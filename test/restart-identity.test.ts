// A restarted `pgdrain start` does not wait for its own leases: a process holds its DRAINER_ID (by
// default generated once in the data folder) while it runs, and one that takes it releases at once
// what an earlier process of that name still held. Tried on real processes killed with SIGKILL;
// the leases here are the default 30 s and the reaper runs every 15 s, so jobs that run again within
// a few seconds of the restart were released by it, not reaped. A live process is never robbed.
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const TOKEN = 'identity-test-token-0123456789';
let t: TestDatabase;
let dir: string;
const running: SidecarProcess[] = [];

const start = async (env: Record<string, string> = {}) => {
  const p = await startSidecarProcess({
    DATABASE_URL: t.url,
    API_TOKEN: TOKEN,
    PGDRAIN_DATA_DIR: dir,
    POLL_INTERVAL_MS: '200',
    ...env,
  });
  running.push(p);
  return p;
};
const kill9 = async (p: SidecarProcess) => {
  p.kill();
  await p.exited;
};
/** The runs of `record` jobs each process started (test_runs: the fixture's table). */
const runsBy = (pid: number) =>
  t.query<{ job_id: string; attempt: number; started_ms: number }>(
    `SELECT job_id::text, attempt, extract(epoch FROM started_at) * 1000 AS started_ms FROM test_runs WHERE pid = $1 ORDER BY job_id`,
    [pid],
  );

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-identity-'));
  await chmod(dir, 0o755);
});
afterEach(async () => {
  for (const p of running.splice(0)) await kill9(p);
  await t.query('TRUNCATE pgdrain.jobs').catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

describe('a drainer identity kept across restarts', () => {
  it('kill -9, then a restart on the same data folder: what the killed process held runs again at once, the lost attempt refunded', async () => {
    const first = await start();
    await t.query(`SELECT pgdrain.enqueue('record', '{"ms": 60000}') FROM generate_series(1, 5)`);
    await until(
      () => runsBy(first.child.pid!),
      (r) => r.length === 5,
      15_000,
      'the first process running all five',
    );
    await kill9(first);
    const id = (await readFile(path.join(dir, 'drainer-id'), 'utf8')).trim();
    const held = await t.query<{ locked_by: string }>(`SELECT locked_by FROM pgdrain.jobs WHERE status = 'running'`);
    expect(held).toHaveLength(5);
    for (const { locked_by } of held) expect(locked_by.startsWith(`sidecar-${id}.`)).toBe(true);

    const startedAt = Date.now();
    const second = await start();
    const again = await until(
      () => runsBy(second.child.pid!),
      (r) => r.length === 5,
      10_000,
      'the restarted process running all five',
    );
    // Well before the 30 s leases would have ended: released by the restart, not reaped.
    for (const run of again) expect(run.started_ms - startedAt).toBeLessThan(10_000);
    // The crash was not the jobs' failure: their attempt came back, and the loss is counted apart.
    expect(again.map((r) => r.attempt)).toEqual([1, 1, 1, 1, 1]);
    const rows = await t.query<{ last_error: string; locked_by: string; lost_attempts: number }>(
      `SELECT last_error, locked_by, lost_attempts FROM pgdrain.jobs ORDER BY id`,
    );
    for (const row of rows) {
      expect(row.lost_attempts).toBe(1);
      expect(row.last_error).toMatch(
        /^drainer restarted: sidecar-.* held the job in an earlier process of the same DRAINER_ID$/,
      );
      expect(row.locked_by.startsWith(`sidecar-${id}.`)).toBe(true);
    }
    expect(second.stdout()).toMatch(/released the jobs an earlier process of this drainer held/);
  });

  it('a second live process given the same DRAINER_ID runs under a fresh one and takes nothing from the first', async () => {
    const first = await start({ DRAINER_ID: 'shared-name' });
    await t.query(`SELECT pgdrain.enqueue('record', '{"ms": 60000}') FROM generate_series(1, 3)`);
    await until(
      () => runsBy(first.child.pid!),
      (r) => r.length === 3,
      15_000,
      'the first process running all three',
    );
    const before = await t.query(`SELECT id, locked_by FROM pgdrain.jobs ORDER BY id`);
    const second = await start({ DRAINER_ID: 'shared-name' });
    await second.waitForOutput(/another live process holds this DRAINER_ID/);
    // A release happens before "sidecar started", which start() waited for: none happened.
    expect(second.stdout()).not.toMatch(/released the jobs an earlier process/);
    expect(await t.query(`SELECT id, locked_by FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`)).toEqual(
      before,
    );
    expect(await runsBy(first.child.pid!)).toHaveLength(3);
  });

  it('a process whose identity connection is cut takes its name back, so a process started after that cannot take it', async () => {
    const first = await start();
    await t.query(`SELECT pgdrain.enqueue('record', '{"ms": 60000}') FROM generate_series(1, 2)`);
    await until(
      () => runsBy(first.child.pid!),
      (r) => r.length === 2,
      15_000,
      'the first process running both',
    );
    const [{ n } = { n: 0 }] = await t.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = 'pgdrain-identity' AND datname = current_database()`,
    );
    expect(n).toBe(1);
    await first.waitForOutput(/this drainer holds its identity again/, 10_000);
    const before = await t.query(`SELECT id, locked_by FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`);
    const second = await start();
    await second.waitForOutput(/another live process holds this DRAINER_ID/);
    expect(await t.query(`SELECT id, locked_by FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`)).toEqual(
      before,
    );
  });
});
