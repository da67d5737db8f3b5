// A job's whole life the way it is deployed: `pgdrain start` processes (the real CLI path, with the
// kinds of test/fixtures/lifecycle/kinds.ts) on one database, used through the HTTP API and the
// typed client. The same behaviour on every driver in-process is test/conformance/job-lifecycle.ts;
// the Worker's side is test/workers/scheduled.test.ts.
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createClient } from '../src/client/index.ts';
import type { Job } from '../src/http/contract.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/lifecycle/sidecar.ts', import.meta.url));
const TOKEN = 'lifecycle-test-token-0123456789';

let t: TestDatabase;
const sidecars: SidecarProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  await t.query('CREATE TABLE public.lifecycle_writes (job_id bigint NOT NULL, attempt int NOT NULL)');
});
afterAll(() => t?.close());
beforeEach(async () => {
  await resetQueue(t, ['public.lifecycle_writes']);
});
afterEach(async () => {
  for (const s of sidecars.splice(0)) {
    s.kill();
    await s.exited;
  }
});

/** A `pgdrain start` process; `env` adds settings (KINDS, …). The default visibility (30 s)
 * renews leases every 10 s: anything faster than that came through NOTIFY. */
async function startSidecar(env: Record<string, string> = {}) {
  const sidecar = await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, ...env }, SIDECAR);
  sidecars.push(sidecar);
  return { sidecar, client: createClient({ baseUrl: sidecar.url, token: TOKEN }) };
}

const jobRow = async (id: string) =>
  (
    await t.query(
      `SELECT status, finished_at, cancel_requested_at, result, progress FROM pgdrain.jobs_and_history WHERE id = $1`,
      [id],
    )
  )[0];

describe("a job's life on sidecar processes", () => {
  it('waitFor answers within about 100 ms of the completion, with the kept result; a job that keeps nothing answers how it ended', async () => {
    const { client } = await startSidecar();
    // The first run of a fresh process loads its handler's code: done before anything is timed.
    await client.waitFor((await client.enqueue({ kind: 'kept', payload: { ms: 0 } })).id, { timeoutSeconds: 10 });

    const lags: number[] = [];
    for (let i = 0; i < 5; i++) {
      const { id } = await client.enqueue({ kind: 'kept', payload: { ms: 600 } });
      const job = (await client.waitFor(id, { timeoutSeconds: 10 })) as Job;
      const answeredAt = Date.now();
      expect(job).toMatchObject({ id, status: 'completed', result: { slept: 600 } });
      lags.push(answeredAt - Date.parse(job.finishedAt!));
    }
    lags.sort((a, b) => a - b);
    console.log(`waitFor answered ${lags.join(', ')} ms after the jobs' finishedAt`);
    // The median of five: one answer delayed by a busy machine does not decide it.
    expect(lags[2]!).toBeLessThan(100);
    expect(lags.at(-1)!).toBeLessThan(500);

    const { id } = await client.enqueue({ kind: 'gone', payload: { ms: 300 } });
    const started = Date.now();
    expect(await client.waitFor(id, { timeoutSeconds: 10 })).toEqual({
      id,
      kind: 'gone',
      status: 'completed',
      finishedAt: expect.any(String),
      gone: true,
    });
    expect(Date.now() - started).toBeLessThan(2_000);
    await expect(client.getJob(id)).rejects.toMatchObject({ status: 404 });
  }, 60_000);

  it('the reaper prunes kept jobs once their time is up, and not before', async () => {
    const { client } = await startSidecar({ REAP_INTERVAL_MS: '300' });
    const { id: old } = await client.enqueue({ kind: 'kept', payload: { ms: 0 } });
    const { id: fresh } = await client.enqueue({ kind: 'kept', payload: { ms: 0 } });
    await client.waitFor(old, { timeoutSeconds: 10 });
    await client.waitFor(fresh, { timeoutSeconds: 10 });
    // Both in the history, out of the hot table.
    expect(await t.query('SELECT id::text FROM pgdrain.jobs')).toEqual([]);
    // The old one's keep ended on a day no partition is left for: the reaper's round deletes it
    // from the default partition (a day partition whose keeps are over is dropped whole: tested
    // in test/conformance/job-lifecycle.ts).
    await t.query(`UPDATE pgdrain.job_history SET keep_until = '2020-01-01 12:00+00' WHERE id = $1`, [old]);
    await until(
      async () => (await t.query('SELECT id::text FROM pgdrain.job_history ORDER BY id')).map((r) => r.id),
      (ids) => ids.length === 1,
      5_000,
      'the prune',
    );
    expect(await t.query('SELECT id::text, status FROM pgdrain.job_history')).toEqual([
      { id: fresh, status: 'completed' },
    ]);
    expect((await client.getJob(fresh)).status).toBe('completed');
  }, 30_000);

  it('progress is visible while the job runs', async () => {
    const { client } = await startSidecar();
    const { id } = await client.enqueue({ kind: 'kept', payload: { ms: 4_000, steps: 4 } });
    const seen = await until(
      async () => (await client.getJob(id)).progress,
      (p) => (p as { step?: number } | null)?.step === 2,
      10_000,
      'progress step 2',
    );
    expect(seen).toEqual({ step: 2, of: 4 });
    expect((await client.getJob(id)).status).toBe('running');
    const done = (await client.waitFor(id, { timeoutSeconds: 10 })) as Job;
    expect(done).toMatchObject({ status: 'completed', progress: { step: 4, of: 4 } });
  }, 30_000);

  it('cancelling through one sidecar stops the job running on another at once (NOTIFY, not the next renewal); never retried', async () => {
    // `a` drains nothing of these kinds; `b` runs them.
    const { client: a } = await startSidecar({ KINDS: 'gone' });
    const { client: b } = await startSidecar({ KINDS: 'endless,kept' });
    const { id } = await b.enqueue({ kind: 'endless', payload: {} });
    await until(
      async () => (await a.getJob(id)).status,
      (s) => s === 'running',
      10_000,
      'the job to run on b',
    );
    expect(await a.cancel(id)).toEqual({ id, status: 'running', cancelRequested: true });
    const ended = await a.waitFor(id, { timeoutSeconds: 15 });
    expect(ended).toMatchObject({ id, status: 'cancelled', attempts: 1, result: null });
    const row = await jobRow(id);
    // Well inside a third of the visibility timeout (10 s): the drainer heard of it at once.
    expect(row!.finished_at.getTime() - row!.cancel_requested_at.getTime()).toBeLessThan(1_000);
    await expect(a.cancel(id)).resolves.toEqual({ id, status: 'cancelled', cancelRequested: true });
    await new Promise((r) => setTimeout(r, 500));
    expect((await jobRow(id))!.status).toBe('cancelled');
  }, 60_000);

  it("a transactional kind: the failed attempt's write is rolled back, the retry commits exactly one row with its completion; the log says why it failed", async () => {
    const { sidecar, client } = await startSidecar();
    const { id } = await client.enqueue({ kind: 'tx', payload: {} });
    const done = (await client.waitFor(id, { timeoutSeconds: 20 })) as Job;
    expect(done).toMatchObject({
      status: 'completed',
      attempts: 2,
      result: { attempt: 2 },
      lastError: 'first attempt fails after writing',
    });
    // The sidecar's log said why the first attempt failed and when the job would run again.
    const line = JSON.parse(await sidecar.waitForOutput(/^(\{.*"msg":"job \d+ \(tx\) attempt 1 of .*)$/m, 5_000));
    expect(line).toMatchObject({
      level: 40,
      jobId: id,
      kind: 'tx',
      attempt: 1,
      maxAttempts: done.maxAttempts,
      error: 'first attempt fails after writing',
      msg: expect.stringMatching(
        new RegExp(
          `^job ${id} \\(tx\\) attempt 1 of \\d+ failed: first attempt fails after writing; it runs again at \\d{4}-`,
        ),
      ),
    });
    expect(Date.parse(line.retryAt)).toBeGreaterThan(Date.parse(done.createdAt));
    expect(await t.query('SELECT job_id::text, attempt FROM public.lifecycle_writes')).toEqual([
      { job_id: id, attempt: 2 },
    ]);
  }, 30_000);

  it('a child enqueued after two parents over HTTP runs once both completed; cancelling a waiting parent makes the child dead', async () => {
    const { client } = await startSidecar();
    const p1 = await client.enqueue({ kind: 'kept', payload: { ms: 200 } });
    const p2 = await client.enqueue({ kind: 'kept', payload: { ms: 400 } });
    const child = await client.enqueue({ kind: 'kept', payload: { ms: 0 }, after: [p1.id, p2.id] });
    expect(child.status).toBe('waiting');
    const done = (await client.waitFor(child.id, { timeoutSeconds: 10 })) as Job;
    expect(done.status).toBe('completed');
    const parents = await Promise.all([client.getJob(p1.id), client.getJob(p2.id)]);
    for (const p of parents) expect(Date.parse(p.finishedAt!)).toBeLessThanOrEqual(Date.parse(done.finishedAt!));

    const blocker = await client.enqueue({ kind: 'kept', payload: { ms: 0 }, delaySeconds: 3_600 });
    const orphan = await client.enqueue({ kind: 'kept', payload: { ms: 0 }, after: [blocker.id] });
    expect(await client.cancel(blocker.id)).toEqual({ id: blocker.id, status: 'cancelled', cancelRequested: true });
    expect(await client.waitFor(orphan.id, { timeoutSeconds: 5 })).toMatchObject({
      status: 'dead',
      lastError: `job ${blocker.id} it waits for ended cancelled`,
    });
  }, 30_000);
});
