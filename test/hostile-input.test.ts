// Hostile requests generated from the app's OpenAPI document (every route and field) at the sidecar's
// app on a real PostgreSQL: any answer is 2xx or 4xx in the contract's error shape (never a 5xx, a
// stack, SQL or a secret), and a refused request changes nothing. FUZZ_SEED=… replays a run (the seed
// is printed on failure); FUZZ_RUNS=… searches longer; HOSTILE_STATS=1 prints the answers per route.
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createApp, parseScopedTokens } from '../src/http/app.ts';
import { createDefaultRegistry } from '../src/jobs/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { FINGERPRINT_SQL, FUZZ_RUNS, FUZZ_SEED, checkAnswer, hostileRequests } from './support/hostile-requests.ts';

const TOKEN = 'hostile-admin-token-0123456789';
const READ_TOKEN = 'hostile-read-token-0123456789';
let t: TestDatabase;
let app: ReturnType<typeof createApp>;
const unexpected: unknown[] = [];
const stats = new Map<string, number>();

beforeAll(async () => {
  t = await createTestDatabase();
  app = createApp({
    withDb: (fn) => fn(t.db),
    registry: createDefaultRegistry({ WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com' }),
    apiToken: TOKEN,
    scopedTokens: parseScopedTokens(`read:${READ_TOKEN}`),
    onError: (error) => unexpected.push(error),
  });
});
afterAll(() => t?.close());

it('no generated request gets a 5xx, a stack, SQL or a secret, and a refused one changes nothing', async () => {
  const secrets = [TOKEN, READ_TOKEN, new URL(t.url).password];
  const document = await (await app.request('/openapi.json')).json();
  await fc.assert(
    fc.asyncProperty(hostileRequests([TOKEN, READ_TOKEN], document), async (request) => {
      const [before] = await t.query(FINGERPRINT_SQL);
      const res = await app.request(request.path, {
        method: request.method,
        headers: request.headers,
        body: request.body,
      });
      const text = await res.text();
      if (process.env.HOSTILE_STATS) {
        const key = `${request.method} ${request.path
          .split('?')[0]!
          .replace(/\/[0-9]+/g, '/N')
          .slice(0, 40)} ${res.status}`;
        stats.set(key, (stats.get(key) ?? 0) + 1);
      }
      const broken = checkAnswer(res.status, res.headers.get('content-type'), text, secrets, request.method);
      if (broken) throw new Error(`${request.method} ${request.path}: ${broken}`);
      if (res.status >= 400) expect(await t.query(FINGERPRINT_SQL)).toEqual([before]);
    }),
    { seed: FUZZ_SEED, numRuns: FUZZ_RUNS },
  );
  if (process.env.HOSTILE_STATS)
    console.log(
      [...stats]
        .sort()
        .map(([k, n]) => `${n} ${k}`)
        .join('\n'),
    );
  expect(unexpected).toEqual([]);
}, 120_000);
