// A Worker's drain ends with its budget: a handler still running at the budget's handler deadline
// is given up (its signal aborted, its attempt failed and retried), and the invocation ends when
// scheduled() returns — under `wrangler dev` as on Cloudflare, workerd then cuts off whatever the
// handler still does. The drain gives handlers it gave up until the budget's end to return, so that
// what they do after their signal (a cleanup, a report) is not cut off midway.
//
// Found by the long chaos run (`npm run chaos -- --long`): a Worker's handler reported `done` as the
// budget ran out, and its `revoked` report, sent after its signal, never arrived.
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { enqueue, enqueueMany } from '../src/queries/index.ts';
import { BATCH_OUTLIVES_BUDGET, OUTLIVES_BUDGET } from './fixtures/budget/kinds.ts';
import { type TestDatabase, createTestDatabase } from './support/database.ts';
import { type FixtureWorker, startFixtureWorkerOnNeon } from './support/fixture-worker.ts';

const WORKER_CONFIG = fileURLToPath(new URL('./fixtures/budget/wrangler.toml', import.meta.url));
/** The budget's margin is 10% (at most 1 s): handlers are given up 300 ms before its end. */
const BUDGET_MS = 6_000;
/** How long the recorder holds its answer to the handler's first report after its signal. */
const CLEANUP_MS = 100;

let t: TestDatabase;
let dir: string;
let worker: FixtureWorker;
let recorder: http.Server;
let recorderUrl: string;
const reports: { step: string; id: string; aborted: string; at: number }[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-budget-end-'));
  recorder = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://recorder');
    const step = url.pathname.slice(1);
    reports.push({
      step,
      id: url.searchParams.get('id') ?? '',
      aborted: url.searchParams.get('aborted') ?? '',
      at: performance.now(),
    });
    setTimeout(() => res.end('ok'), step === 'cleanup' ? CLEANUP_MS : 0);
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  recorderUrl = `http://127.0.0.1:${(recorder.address() as { port: number }).port}`;
  worker = await startFixtureWorkerOnNeon({
    config: WORKER_CONFIG,
    databaseUrl: t.url,
    dir,
    env: { API_TOKEN: 'budget-end-token-0123456789', DRAIN_BUDGET_MS: String(BUDGET_MS) },
  });
}, 60_000);

afterAll(async () => {
  await worker?.stop();
  await new Promise((r) => recorder?.close(r));
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Runs one cron invocation; the cleanup reports of `id` (the job's, or a batch's ids joined by
 * commas) as [step, aborted], and whether the last arrived before the invocation ended. */
async function invocation(id: () => string): Promise<{ steps: string[][]; beforeTheEnd: boolean }> {
  reports.length = 0;
  await worker.scheduled();
  const returnedAt = performance.now();
  const ofJob = reports.filter((r) => r.id === id());
  return { steps: ofJob.map((r) => [r.step, r.aborted]), beforeTheEnd: (ofJob.at(-1)?.at ?? Infinity) < returnedAt };
}

/** Its attempt was given up for its time: failed, and pending again for its retry. */
async function expectRetried(ids: readonly string[], what: 'handler' | 'batch handler') {
  const rows = await t.query<{ status: string; attempts: number; last_error: string }>(
    'SELECT status, attempts, last_error FROM pgdrain.jobs WHERE id = ANY($1::bigint[]) ORDER BY id',
    [ids],
  );
  expect(rows).toHaveLength(ids.length);
  for (const row of rows) {
    expect(row).toMatchObject({ status: 'pending', attempts: 1 });
    expect(row.last_error).toContain(`${what} did not finish within the drain's remaining budget`);
  }
}

// scheduled() answers when the invocation ends: both reports arrived while it was still there, the
// second sent after the recorder answered the first.
it('a handler given up at the budget gets until its end: what it does after its signal is not cut off', async () => {
  const job = await enqueue(t.db, { kind: OUTLIVES_BUDGET, payload: { recorder: recorderUrl } });
  const { steps, beforeTheEnd } = await invocation(() => job.id);
  expect(steps).toEqual([
    ['cleanup', 'true'],
    ['cleaned', 'true'],
  ]);
  expect(beforeTheEnd).toBe(true);
  await expectRetried([job.id], 'handler');
}, 60_000);

it('a batch handler given up at the budget: the same', async () => {
  // The first test's job, pending for its retry, would run in this invocation too: out of the way.
  await t.query(`DELETE FROM pgdrain.jobs WHERE kind = $1`, [OUTLIVES_BUDGET]);
  const jobs = await enqueueMany(
    t.db,
    [1, 2, 3].map(() => ({ kind: BATCH_OUTLIVES_BUDGET, payload: { recorder: recorderUrl } })),
  );
  const ids = jobs.map((j) => j.id);
  const { steps, beforeTheEnd } = await invocation(() => ids.join(','));
  expect(steps).toEqual([
    ['cleanup', 'true'],
    ['cleaned', 'true'],
  ]);
  expect(beforeTheEnd).toBe(true);
  await expectRetried(ids, 'batch handler');
}, 60_000);
