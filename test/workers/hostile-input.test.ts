// The same generated hostile requests as test/hostile-input.test.ts, at the deployed Worker in
// workerd on the Neon driver, on a database of its own (other test files change theirs meanwhile):
// never a 5xx, a stack, SQL or a secret; a refused request changes nothing.
import { createExecutionContext, env, waitOnExecutionContext } from 'cloudflare:test';
import worker from '../../src/worker/index.ts';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Harness } from '../support/harness.ts';
import { FINGERPRINT_SQL, FUZZ_SEED, checkAnswer, hostileRequests } from '../support/hostile-requests.ts';
import { createNeonHarness } from './neon-harness.ts';

let h: Harness;
beforeAll(async () => {
  h = await createNeonHarness(env.HOSTILE_DATABASE_URL);
});
afterAll(() => h?.close());

it('no generated request gets a 5xx, a stack, SQL or a secret from the Worker, and a refused one changes nothing', async () => {
  const readToken = 'worker-read-token-01234567';
  const secrets = [env.API_TOKEN, readToken, new URL(env.HOSTILE_DATABASE_URL).password];
  const workerEnv = { ...env, DATABASE_URL: env.HOSTILE_DATABASE_URL };
  const ask = async (request: Request) => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(request, workerEnv as never, ctx as never);
    await waitOnExecutionContext(ctx);
    return res;
  };
  const document = await (await ask(new Request('http://worker/openapi.json'))).json();
  await fc.assert(
    fc.asyncProperty(hostileRequests([env.API_TOKEN, readToken], document), async (request) => {
      const [before] = await h.query(FINGERPRINT_SQL);
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request(`http://worker${request.path}`, {
          method: request.method,
          headers: request.headers,
          body: request.body,
        }),
        workerEnv as never,
        ctx as never,
      );
      const text = await res.text();
      await waitOnExecutionContext(ctx);
      const broken = checkAnswer(res.status, res.headers.get('content-type'), text, secrets, request.method);
      if (broken) throw new Error(`${request.method} ${request.path}: ${broken}`);
      if (res.status >= 400) expect(await h.query(FINGERPRINT_SQL)).toEqual([before]);
    }),
    { seed: FUZZ_SEED, numRuns: 300 },
  );
}, 120_000);
