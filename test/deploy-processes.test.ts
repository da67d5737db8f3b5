// A deploy of changed workflow code on the real `pgdrain start --jobs FILE`, with runs parked: the
// sidecar stopped, the jobs module swapped, started again. A renamed step holds the parked runs
// (nothing of the new code runs); the fix — the old code kept as version 1 beside a version 2 —
// lets them finish on the old code while new runs start on the new. `pgdrain workflows check`
// says beforehand which deploy would hold them. Every step's side effect is counted in a file.
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createClient } from '../src/client/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { QUICK_DRIZZLE, type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const CLI = fileURLToPath(new URL('../src/entry/cli.ts', import.meta.url));
const module = (name: string) => fileURLToPath(new URL(`./fixtures/deploy/${name}.ts`, import.meta.url));
const TOKEN = 'deploy-test-token-0123456789';

let t: TestDatabase;
let dir: string;
let effectsFile: string;
const running: SidecarProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-deploy-'));
  await chmod(dir, 0o755);
  effectsFile = path.join(dir, 'effects.txt');
  await writeFile(effectsFile, '');
});
afterAll(async () => {
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});
afterEach(async () => {
  for (const s of running.splice(0)) {
    s.kill();
    await s.exited;
  }
});

const env = () => ({ DATABASE_URL: t.url, API_TOKEN: TOKEN, PGDRAIN_DATA_DIR: dir, EFFECTS_FILE: effectsFile });

/** `pgdrain start --jobs <fixture>`. */
async function start(jobs: string): Promise<SidecarProcess> {
  const sidecar = await startSidecarProcess(env(), CLI, { args: ['start', '--jobs', module(jobs)] });
  running.push(sidecar);
  return sidecar;
}

/** A graceful stop (SIGTERM), as a deploy stops the old process. */
async function stop(sidecar: SidecarProcess): Promise<void> {
  sidecar.child.kill('SIGTERM');
  expect(await sidecar.exited).toEqual({ code: 0, signal: null });
  running.splice(running.indexOf(sidecar), 1);
}

/** `pgdrain workflows check --jobs <fixture> --json`: its exit code and report. */
async function check(jobs: string): Promise<{ code: number; report: Record<string, any> }> {
  const args = ['--import', QUICK_DRIZZLE, CLI, 'workflows', 'check', '--jobs', module(jobs), '--json'];
  try {
    const { stdout } = await promisify(execFile)(process.execPath, args, {
      env: { PATH: process.env.PATH!, ...env() },
    });
    return { code: 0, report: JSON.parse(stdout) };
  } catch (error) {
    const failed = error as { code: number; stdout: string };
    return { code: failed.code, report: JSON.parse(failed.stdout) };
  }
}

const effects = async () => (await readFile(effectsFile, 'utf8')).trim().split('\n').filter(Boolean).sort();
const runs = (ids: readonly string[]) =>
  t.query<{ id: string; status: string; held: { step?: string } | null; attempts: number }>(
    `SELECT id::text AS id, status, held, attempts FROM pgdrain.jobs_and_history WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );

it('a renamed step holds the parked runs and runs nothing; the old code kept as version 1 finishes them beside version 2', async () => {
  let sidecar = await start('v1');
  const clientOf = (s: SidecarProcess) => createClient({ baseUrl: s.url, token: TOKEN });
  const client = clientOf(sidecar);
  const ids: string[] = [];
  for (const n of [1, 2, 3]) ids.push((await client.enqueue({ kind: 'deploy_order', payload: { n } })).id);
  await until(
    async () => (await runs(ids)).filter((r) => r.status === 'waiting').length === 3,
    (all) => all,
    15_000,
    'the runs to park',
  );
  await stop(sidecar);

  // Before the deploy: the check names the runs the renamed step would hold, and passes the fix.
  const renamed = await check('renamed');
  expect(renamed.code).toBe(1);
  expect(renamed.report).toMatchObject({ checked: 3, kinds: { deploy_order: { checked: 3, diverges: 3, fails: 0 } } });
  expect(renamed.report.diverges.map((d: { step: string }) => d.step)).toEqual([
    'reserve-stock',
    'reserve-stock',
    'reserve-stock',
  ]);
  const fixed = await check('versions');
  expect(fixed).toMatchObject({ code: 0, report: { checked: 3, diverges: [], fails: [], unclaimable: [] } });

  // The renamed deploy anyway: the parked runs are held at its start, and nothing of it runs.
  sidecar = await start('renamed');
  await until(
    async () => (await runs(ids)).filter((r) => r.held?.step === 'reserve-stock').length === 3,
    (all) => all,
    15_000,
    'the runs to be held',
  );
  // Counted as held where an operator looks first.
  expect((await clientOf(sidecar).stats()).kinds.deploy_order).toMatchObject({ waiting: 3, held: 3 });
  await stop(sidecar);
  expect((await runs(ids)).map((r) => [r.status, r.attempts])).toEqual([
    ['waiting', 0],
    ['waiting', 0],
    ['waiting', 0],
  ]);

  // The fix: version 1 beside version 2. The held runs replay on version 1 and park again; paid,
  // they ship on it. A new run starts on version 2.
  sidecar = await start('versions');
  const fresh = (await clientOf(sidecar).enqueue({ kind: 'deploy_order', payload: { n: 4 } })).id;
  await until(
    async () => (await runs([...ids, fresh])).filter((r) => r.status === 'waiting' && !r.held).length === 4,
    (all) => all,
    15_000,
    'every run to wait for its payment',
  );
  // Runs per version: version 1 may be deleted once its count is 0.
  expect((await clientOf(sidecar).stats()).kinds.deploy_order).toMatchObject({ held: 0, versions: { 1: 3, 2: 1 } });
  for (const n of [1, 2, 3, 4]) {
    const response = await fetch(`${sidecar.url}/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'order.paid', key: String(n), payload: {} }),
    });
    expect(response.status).toBeLessThan(300);
  }
  await until(
    async () => (await runs([...ids, fresh])).length === 0,
    (all) => all,
    15_000,
    'every run to complete (a completed run of a kind that keeps none is gone)',
  );
  await stop(sidecar);
  expect(await effects()).toEqual(
    [
      '1 reserve@v1',
      '2 reserve@v1',
      '3 reserve@v1',
      '1 ship@v1',
      '2 ship@v1',
      '3 ship@v1',
      '4 check-and-reserve@v2',
      '4 ship@v2',
    ].sort(),
  );
}, 120_000);
