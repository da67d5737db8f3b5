// Durable workflows the way they are deployed: `pgdrain start` processes killed with SIGKILL in the
// middle of a plain step, a transactional step, a sleep and a wait, one after another, each
// followed by a fresh process. Every step's effect happens once, except the plain step in flight at
// its kill, which runs again; the transactional one in flight leaves nothing (its write rolled back
// with its record). The event is sent in SQL while no process runs: the next one finds it. The same
// on every driver in-process is test/conformance/workflows.ts.
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createClient } from '../src/client/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/workflows/sidecar.ts', import.meta.url));
const TOKEN = 'workflow-test-token-0123456789';

let t: TestDatabase;
const running: SidecarProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  await t.query(
    'CREATE TABLE public.workflow_effects (job_id bigint NOT NULL, step text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())',
  );
});
afterAll(() => t?.close());
afterEach(async () => {
  for (const s of running.splice(0)) {
    s.kill();
    await s.exited;
  }
});

/** A `pgdrain start` process whose leases run out 2 s after it dies, reaped within 0.3 s. */
async function start() {
  const sidecar = await startSidecarProcess(
    { DATABASE_URL: t.url, API_TOKEN: TOKEN, VISIBILITY_TIMEOUT_SECONDS: '2', REAP_INTERVAL_MS: '300' },
    SIDECAR,
  );
  running.push(sidecar);
  return sidecar;
}

async function killNine(sidecar: SidecarProcess) {
  sidecar.child.kill('SIGKILL');
  await sidecar.exited;
  running.splice(running.indexOf(sidecar), 1);
}

const effects = async (id: string) => {
  const rows = await t.query<{ step: string; n: number }>(
    'SELECT step, count(*)::int AS n FROM public.workflow_effects WHERE job_id = $1 GROUP BY step',
    [id],
  );
  return Object.fromEntries(rows.map((r) => [r.step, r.n]));
};
const stepRow = async (id: string, name: string) =>
  (await t.query('SELECT status FROM pgdrain.workflow_steps WHERE job_id = $1 AND name = $2', [id, name]))[0]?.status;
const jobStatus = async (id: string) =>
  (await t.query('SELECT status FROM pgdrain.jobs_and_history WHERE id = $1', [id]))[0]?.status;

it('kill -9 in a step, a transactional step, a sleep and a wait: each effect once but the plain step in flight', async () => {
  let sidecar = await start();
  const client = createClient({ baseUrl: sidecar.url, token: TOKEN });
  const { id } = await client.enqueue({ kind: 'wf_killed', payload: { slowMs: 4000, napSeconds: 1 } });

  // 1. In the plain step 'slow': it runs again in the next process.
  await until(
    () => effects(id),
    (e) => e.slow === 1,
    15_000,
    'the slow step to start',
  );
  await killNine(sidecar);
  sidecar = await start();
  // 2. In the transactional step, after its write, before its commit: the write is rolled back.
  await until(
    () => effects(id),
    (e) => e['b-try'] === 1,
    20_000,
    'the transactional step to start',
  );
  await killNine(sidecar);
  expect((await effects(id)).b).toBeUndefined();
  sidecar = await start();
  // 3. In the sleep: the run is snoozed (pending until the sleep's end), nothing held.
  await until(
    () => stepRow(id, 'nap'),
    (s) => s === 'sleeping',
    20_000,
    'the sleep',
  );
  expect((await t.query('SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1', [id]))[0]).toEqual({
    status: 'pending',
    locked_by: null,
  });
  await killNine(sidecar);
  sidecar = await start();
  // 4. In the wait, after the sleep ended: the next process claimed it (no process was there at its time).
  await until(
    () => stepRow(id, 'go'),
    (s) => s === 'waiting',
    20_000,
    'the wait',
  );
  await killNine(sidecar);
  // The event, sent in SQL while no process runs.
  await t.query(`SELECT pgdrain.send_event('test.go', $1, '{"go": 1}')`, [`run:${id}`]);
  expect(await jobStatus(id)).toBe('pending');
  sidecar = await start();
  await until(
    () => jobStatus(id),
    (s) => s === 'completed',
    20_000,
    'the run to complete',
  );

  expect(await effects(id)).toEqual({ a: 1, slow: 2, 'b-try': 2, b: 1, c: 1 });
  const steps = await t.query(
    'SELECT name, status, attempts FROM pgdrain.workflow_steps WHERE job_id = $1 ORDER BY position',
    [id],
  );
  expect(steps.map((s) => `${s.name}:${s.status}`)).toEqual([
    'a:completed',
    'slow:completed',
    'b-tx:completed',
    'nap:completed',
    'go:completed',
    'c:completed',
  ]);
  const job = await createClient({ baseUrl: sidecar.url, token: TOKEN }).getJob(id);
  expect(job).toMatchObject({ status: 'completed', result: { answer: { go: 1 } } });
  expect(job.steps?.map((s) => s.name)).toEqual(['a', 'slow', 'b-tx', 'nap', 'go', 'c']);
}, 120_000);

it('Promise.all over 20 children of 500 ms on `pgdrain start`: all enqueued in one transaction, run side by side', async () => {
  const sidecar = await start();
  const client = createClient({ baseUrl: sidecar.url, token: TOKEN });
  const started = Date.now();
  const { id } = await client.enqueue({ kind: 'wf_fan_out', payload: { children: 20 } });
  await until(
    () => jobStatus(id),
    (s) => s === 'completed',
    30_000,
    'the fan-out to complete',
  );
  const elapsed = Date.now() - started;
  const job = await client.getJob(id);
  expect(job).toMatchObject({ status: 'completed', result: { sum: 190 } });
  // One transaction enqueued them all (one now()), and every child ran once and completed.
  const children = await t.query<{ n: number; moments: number; completed: number }>(
    `SELECT count(*)::int AS n, count(DISTINCT created_at)::int AS moments, count(*) FILTER (WHERE status = 'completed')::int AS completed
       FROM pgdrain.jobs_and_history WHERE kind = 'wf_fan_child'`,
  );
  expect(children).toEqual([{ n: 20, moments: 1, completed: 20 }]);
  // Side by side: far less than the 10 s they take one after another (measured: see the note).
  console.log(`fan-out of 20 children of 500 ms: ${elapsed} ms end to end`);
  expect(elapsed).toBeLessThan(10_000);
});

it('a sleep inside try/catch on `pgdrain start`: the catch never runs and the step after waits for the sleep', async () => {
  const sidecar = await start();
  const client = createClient({ baseUrl: sidecar.url, token: TOKEN });
  const enqueuedAt = Date.now();
  const { id } = await client.enqueue({ kind: 'wf_swallow', payload: {} });
  await until(
    () => jobStatus(id),
    (s) => s === 'completed',
    20_000,
    'the run to complete',
  );
  const job = await client.getJob(id);
  expect((job.result as { wokeAt: number }).wokeAt).toBeGreaterThanOrEqual(enqueuedAt + 1_000);
  expect(await effects(id)).toEqual({});
});

it('progress reported before a park is saved with it; GET /jobs/:id with and without waitSeconds has one shape', async () => {
  const sidecar = await start();
  const client = createClient({ baseUrl: sidecar.url, token: TOKEN });
  const { id } = await client.enqueue({ kind: 'wf_progress', payload: {} });
  await until(
    () => stepRow(id, 'nap'),
    (s) => s === 'sleeping',
    15_000,
    'the sleep',
  );
  const read = async (query: string) =>
    (await fetch(`${sidecar.url}/jobs/${id}${query}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  const plain = (await read('')) as Record<string, unknown>;
  expect(plain).toMatchObject({
    status: 'pending',
    progress: { phase: 'napping' },
    waitingOn: { name: 'nap', status: 'sleeping' },
  });
  const waited = (await read('?waitSeconds=1')) as Record<string, unknown>; // returns asleep still
  expect(Object.keys(waited).sort()).toEqual(Object.keys(plain).sort());
  expect(waited).toMatchObject({ steps: plain.steps, waitingOn: plain.waitingOn, progress: { phase: 'napping' } });
  // Waiting through the end: the completed run, with its steps.
  const done = (await read('?waitSeconds=10')) as Record<string, unknown>;
  expect(done).toMatchObject({ status: 'completed', result: 'rested', waitingOn: null });
  expect((done.steps as { name: string; status: string }[]).map((s) => [s.name, s.status])).toEqual([
    ['nap', 'completed'],
  ]);
});

it('a dead run restarted from a step over HTTP on `pgdrain start`: 409 while it is live, 400 for an unknown step (and the kept run stays where it was), one of two restarts at once', async () => {
  const sidecar = await start();
  const client = createClient({ baseUrl: sidecar.url, token: TOKEN });
  const { id } = await client.enqueue({ kind: 'wf_restartable', payload: {} });
  await until(
    () => jobStatus(id),
    (s) => s === 'dead',
    15_000,
    'the run to die at charge',
  );
  await expect(client.retryJob(id, { fromStep: 'refund' })).rejects.toMatchObject({
    status: 400,
    code: 'unknown_step',
    message: expect.stringMatching(/its steps: reserve, charge/),
  });
  await t.query(`INSERT INTO public.workflow_effects (job_id, step) VALUES ($1, 'fixed')`, [id]);
  expect(await client.retryJob(id, { fromStep: 'charge' })).toMatchObject({ id, status: 'pending', attempts: 0 });
  // While it runs or sleeps, another restart is refused.
  await until(
    () => stepRow(id, 'settle'),
    (s) => s === 'sleeping',
    15_000,
    'the sleep after charge',
  );
  await expect(client.retryJob(id, { fromStep: 'reserve' })).rejects.toMatchObject({ status: 409, code: 'live' });
  await until(
    () => jobStatus(id),
    (s) => s === 'completed',
    15_000,
    'the restarted run to complete',
  );
  expect(await effects(id)).toEqual({ reserve: 1, charge: 2, fixed: 1, ship: 1 });

  // Kept once completed, in the history: a refused restart leaves it there, as it was.
  const inHistory = () => t.query('SELECT status, attempts FROM pgdrain.job_history WHERE id = $1', [id]);
  const kept = await inHistory();
  expect(kept).toEqual([{ status: 'completed', attempts: expect.any(Number) }]);
  await expect(client.retryJob(id, { fromStep: 'nope' })).rejects.toMatchObject({ status: 400, code: 'unknown_step' });
  expect(await inHistory()).toEqual(kept);
  expect(await t.query('SELECT id FROM pgdrain.jobs WHERE id = $1', [id])).toEqual([]);

  // Two restarts of the kept run at once (the kind paused, so the restarted run stays pending): one
  // restarts it, the other is told it is live — never that the job does not exist.
  await client.pauseKind('wf_restartable');
  for (let round = 0; round < 3; round++) {
    const answers = await Promise.allSettled([
      client.retryJob(id, { fromStep: 'ship' }),
      client.retryJob(id, { fromStep: 'ship' }),
    ]);
    expect(answers.filter((a) => a.status === 'fulfilled')).toHaveLength(1);
    expect(answers.find((a) => a.status === 'rejected')).toMatchObject({ reason: { status: 409, code: 'live' } });
    await client.resumeKind('wf_restartable');
    await until(
      () => t.query('SELECT 1 FROM pgdrain.job_history WHERE id = $1', [id]),
      (rows) => rows.length === 1,
      15_000,
      'the restarted run to complete again',
    );
    await client.pauseKind('wf_restartable');
  }
  await client.resumeKind('wf_restartable');
  expect(await effects(id)).toMatchObject({ ship: 4 });
});
