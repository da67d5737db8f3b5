// The typed client inside workerd, calling the Worker through a fetch it is given — the way one
// Worker calls another through a service binding — on the Worker's own database.
import { createExecutionContext, env, waitOnExecutionContext } from 'cloudflare:test';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createClient, PgdrainApiError } from '../../src/entry/client.ts';
import * as contract from '../../src/http/contract.ts';
import { createWorker, type Env } from '../../src/worker/create-worker.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { createNeonHarness } from './neon-harness.ts';

const worker = createWorker();
const workerEnv = { ...(env as unknown as Env), DATABASE_URL: env.CLIENT_DATABASE_URL };
/** Like a service binding: each call is a request to the Worker's fetch, with its own context. */
const binding = async (url: string, init: RequestInit) => {
  const ctx = createExecutionContext();
  const response = await worker.fetch(new Request(url, init), workerEnv, ctx as never);
  await waitOnExecutionContext(ctx);
  return response;
};
const queue = createClient({ baseUrl: 'https://queue.internal', token: env.API_TOKEN, fetch: binding });

let h: Harness;
beforeAll(async () => {
  h = await createNeonHarness(env.CLIENT_DATABASE_URL);
  await resetQueue(h);
});
afterAll(() => h?.close());

async function failure(call: Promise<unknown>): Promise<PgdrainApiError> {
  const error = await call.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PgdrainApiError);
  return error as PgdrainApiError;
}

it('drives the Worker: enqueue, batch, get, list, stats, retry and delete, as documented', async () => {
  expect(await queue.health()).toEqual({ ok: true });
  const one = contract.enqueued.parse(
    await queue.enqueue({ kind: 'noop', payload: { via: 'client' }, delaySeconds: 3600 }),
  );
  const batch = contract.batchEnqueued.parse(
    await queue.enqueueBatch([
      { kind: 'noop', payload: 1, delaySeconds: 3600 },
      { kind: 'noop', payload: 2, delaySeconds: 3600 },
    ]),
  );
  expect(contract.job.parse(await queue.getJob(one.id))).toMatchObject({
    id: one.id,
    payload: { via: 'client' },
    status: 'pending',
  });
  expect(contract.jobPage.parse(await queue.listJobs({ limit: 10 })).jobs.map((j) => j.id)).toEqual(
    [...batch.ids].reverse().concat(one.id),
  );
  expect(contract.queueStats.parse(await queue.stats()).kinds.noop).toMatchObject({ pending: 3, delayed: 3 });
  const [dead] = await h.query<{ id: string }>(
    `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts) VALUES ('noop', '{}', 'dead', 3, 3) RETURNING id::text`,
  );
  expect(contract.job.parse(await queue.retryJob(dead!.id))).toMatchObject({ status: 'pending', attempts: 0 });
  expect(await queue.deleteJob(dead!.id)).toBeUndefined();
});

it('the errors arrive typed: 401, 404, 409, 422', async () => {
  expect(
    await failure(
      createClient({ baseUrl: 'https://queue.internal', token: 'wrong-token-0123456789', fetch: binding }).stats(),
    ),
  ).toMatchObject({ status: 401, code: 'unauthorized' });
  expect(await failure(queue.getJob('123456789'))).toMatchObject({ status: 404, code: 'not_found' });
  const { id } = await queue.enqueue({ kind: 'noop', payload: {}, delaySeconds: 3600 });
  expect(await failure(queue.retryJob(id))).toMatchObject({ status: 409, code: 'not_dead' });
  const unknownKind = await failure(queue.enqueue({ kind: 'send_fax', payload: {} }));
  expect(unknownKind).toMatchObject({ status: 422, code: 'unknown_kind' });
  expect(unknownKind.message).toContain('send_fax');
});
