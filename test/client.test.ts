// The typed client (pgdrain/client) against the real sidecar process: every method, each answer
// checked against the contract's response schema (what /openapi.json documents), and the API's
// errors surfacing as PgdrainApiError with their status and code.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createClient, PgdrainApiError } from '../src/entry/client.ts';
import * as contract from '../src/http/contract.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const TOKEN = 'client-test-token-0123456789';
const READ_TOKEN = 'client-read-token-0123456789';
let t: TestDatabase;
let sidecar: SidecarProcess;
let queue: ReturnType<typeof createClient>;

beforeAll(async () => {
  t = await createTestDatabase();
  sidecar = await startSidecarProcess({
    DATABASE_URL: t.url,
    API_TOKEN: TOKEN,
    API_TOKENS: `read:${READ_TOKEN}`,
    WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com',
  });
  queue = createClient({ baseUrl: sidecar.url, token: TOKEN });
});
afterAll(async () => {
  sidecar?.kill();
  await t?.close();
});
beforeEach(async () => {
  await resetQueue(t);
});

/** The error a call rejects with, which must be a PgdrainApiError. */
async function failure(call: Promise<unknown>): Promise<PgdrainApiError> {
  const error = await call.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PgdrainApiError);
  return error as PgdrainApiError;
}

describe('the typed client against the sidecar', () => {
  it('health, enqueue (and its dedupe), batch, get, list with a cursor: answers as documented', async () => {
    expect(contract.health.parse(await queue.health())).toEqual({ ok: true });
    // Delayed an hour, so the running sidecar leaves them be.
    const one = contract.enqueued.parse(
      await queue.enqueue({ kind: 'noop', payload: { n: 1 }, delaySeconds: 3600, dedupeKey: 'k-1', priority: 5 }),
    );
    expect(one).toEqual({ id: expect.any(String), status: 'pending', runAt: expect.any(String) });
    expect(await queue.enqueue({ kind: 'noop', payload: { n: 2 }, dedupeKey: 'k-1' })).toEqual({
      ...one,
      deduplicated: true,
    });
    const batch = contract.batchEnqueued.parse(
      await queue.enqueueBatch([1, 2, 3].map((n) => ({ kind: 'noop', payload: { n }, delaySeconds: 3600 }))),
    );
    expect(batch.ids).toHaveLength(3);
    const job = contract.job.parse(await queue.getJob(one.id));
    expect(job).toMatchObject({
      id: one.id,
      kind: 'noop',
      payload: { n: 1 },
      status: 'pending',
      priority: 5,
      attempts: 0,
    });
    const first = contract.jobPage.parse(await queue.listJobs({ status: 'pending', limit: 2 }));
    expect(first.jobs.map((j) => j.id)).toEqual([batch.ids[2], batch.ids[1]]);
    const rest = contract.jobPage.parse(
      await queue.listJobs({ status: 'pending', limit: 2, cursor: first.nextCursor! }),
    );
    expect(rest).toMatchObject({ jobs: [{ id: batch.ids[0] }, { id: one.id }], nextCursor: null });
  });

  it('a job enqueued through the client runs on the sidecar and is gone', async () => {
    const { id } = await queue.enqueue({ kind: 'noop', payload: {} });
    await until(
      () =>
        queue.getJob(id).then(
          () => 'there',
          (e: PgdrainApiError) => e.code,
        ),
      (s) => s === 'not_found',
      5_000,
      'the job to complete',
    );
  });

  it('stats, throughput, schedules, pause and resume', async () => {
    await queue.enqueue({ kind: 'noop', payload: {}, delaySeconds: 3600 });
    const stats = contract.queueStats.parse(await queue.stats());
    expect(stats.kinds.noop).toMatchObject({ pending: 1, delayed: 1, paused: false });
    expect(contract.throughput.parse(await queue.throughput({ minutes: 5 })).minutes.length).toBeLessThanOrEqual(5);
    expect(contract.scheduleList.parse(await queue.schedules())).toEqual({ schedules: [] });
    expect(contract.kindPaused.parse(await queue.pauseKind('noop'))).toEqual({ kind: 'noop', paused: true });
    expect((await queue.stats()).kinds.noop!.paused).toBe(true);
    expect(await queue.resumeKind('noop')).toEqual({ kind: 'noop', paused: false });
  });

  it('retry and delete one job, and the dead in bulk', async () => {
    const insertDead = async (kind: string) =>
      (
        await t.query(
          `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error, run_at)
                      VALUES ($1, '{}', 'dead', 3, 3, 'boom', now() + interval '1 hour') RETURNING id::text`,
          [kind],
        )
      )[0]!.id as string;
    const dead = await insertDead('fax');
    const retried = contract.job.parse(await queue.retryJob(dead));
    expect(retried).toMatchObject({ id: dead, status: 'pending', attempts: 0, lastError: 'boom' });
    // Pending now: retrying again is a conflict; deleting it works once.
    expect(await failure(queue.retryJob(dead))).toMatchObject({ status: 409, code: 'not_dead' });
    expect(await queue.deleteJob(dead)).toBeUndefined();
    expect(await failure(queue.deleteJob(dead))).toMatchObject({ status: 404, code: 'not_found' });
    for (let i = 0; i < 3; i++) await insertDead('fax');
    await insertDead('telex');
    expect(contract.deadRetried.parse(await queue.retryDeadJobs({ kind: 'fax' }))).toEqual({ retried: 3, done: true });
    expect(contract.deadDeleted.parse(await queue.deleteDeadJobs())).toEqual({ deleted: 1, done: true });
  });

  it("surfaces the API's errors as PgdrainApiError: 400, 401, 403, 404, 409, 422, and no response at all", async () => {
    const invalid = await failure(queue.enqueue({ kind: 'noop', payload: {}, maxAttempts: 0 }));
    expect(invalid).toMatchObject({ status: 400, code: 'invalid_request' });
    expect(invalid.message).toContain('maxAttempts');
    expect(await failure(queue.getJob('not-a-number'))).toMatchObject({ status: 400, code: 'invalid_id' });
    expect(
      await failure(createClient({ baseUrl: sidecar.url, token: 'wrong-token-0123456789' }).stats()),
    ).toMatchObject({ status: 401, code: 'unauthorized' });
    expect(await failure(createClient({ baseUrl: sidecar.url }).stats())).toMatchObject({
      status: 401,
      code: 'unauthorized',
    });
    const reader = createClient({ baseUrl: `${sidecar.url}/`, token: READ_TOKEN });
    expect(contract.queueStats.parse(await reader.stats())).toEqual({
      kinds: {},
      oldestReadySeconds: null,
      subscriptions: [],
    });
    expect(await failure(reader.enqueue({ kind: 'noop', payload: {} }))).toMatchObject({
      status: 403,
      code: 'forbidden',
    });
    expect(await failure(queue.getJob('987654321'))).toMatchObject({ status: 404, code: 'not_found' });
    expect(await failure(queue.pauseKind('send_fax'))).toMatchObject({ status: 404, code: 'not_found' });
    expect(await failure(queue.enqueue({ kind: 'send_fax', payload: {} }))).toMatchObject({
      status: 422,
      code: 'unknown_kind',
    });
    expect(await failure(queue.enqueue({ kind: 'webhook', payload: { url: 'http://10.0.0.1/' } }))).toMatchObject({
      status: 422,
      code: 'invalid_payload',
    });
    expect(await failure(queue.enqueueBatch([]))).toMatchObject({ status: 400, code: 'invalid_request' });
    const nowhere = await failure(createClient({ baseUrl: 'http://127.0.0.1:1', token: TOKEN }).stats());
    expect(nowhere).toMatchObject({ status: 0, code: 'network_error' });
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });

  it('goes through a fetch it is given (a service binding, a proxy), with the mount prefix in baseUrl', async () => {
    const seen: string[] = [];
    const proxied = createClient({
      baseUrl: 'http://queue.internal/queue',
      token: TOKEN,
      fetch: (url, init) => {
        seen.push(`${init.method} ${url}`);
        return fetch(url.replace('http://queue.internal/queue', sidecar.url), init);
      },
    });
    const { id } = await proxied.enqueue({ kind: 'noop', payload: {}, delaySeconds: 60 });
    await proxied.listJobs({ kind: 'noop', limit: 1 });
    expect(seen).toEqual([
      'POST http://queue.internal/queue/jobs',
      'GET http://queue.internal/queue/jobs?kind=noop&limit=1',
    ]);
    expect((await queue.getJob(id)).status).toBe('pending');
  });
});
