// The HTTP API's contract route by route, written once and run against every runtime that serves
// it: the app in-process (test/http-api.test.ts) and the Worker under `wrangler dev` on its Neon and
// Hyperdrive paths (test/worker-dev-api.test.ts). Each test asserts on the responses and on the
// rows in a real PostgreSQL.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_ATTEMPT_LOG } from '../../src/db/schema.ts';
import { claim, fail, reap, writeKinds } from '../../src/queries/index.ts';
import type { TestDatabase } from '../support/database.ts';
import { resetQueue } from '../support/harness.ts';
import { until } from '../support/time.ts';

export interface ApiTarget {
  /** A request to the API, by path ("/jobs"), the way a client sends it. */
  request(path: string, init?: RequestInit): Promise<Response>;
  /** The database the API serves, for arranging and asserting. */
  t: Pick<TestDatabase, 'db' | 'query'>;
  /** The API token the target was started with. */
  token: string;
  /** Failures the server reported (its onError / request_failed log lines) since the last call. */
  loggedErrors(): Promise<string[]>;
  close(): Promise<void>;
}

/**
 * Settings the target must be started with: API token, WEBHOOK_ALLOWED_HOSTS, MAX_BODY_BYTES.
 */
export const CONTRACT_SETTINGS = {
  webhookAllowedHosts: 'hooks.example.com, *.example.org',
  maxBodyBytes: 64 * 1024,
} as const;

export async function expectError(res: Response, status: number, code: string, messagePart?: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/application\/json/);
  const body = await res.json();
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe('string');
  if (messagePart) expect(body.error.message).toContain(messagePart);
  return body;
}

export function httpApiContract(name: string, startTarget: () => Promise<ApiTarget>) {
  describe(`the HTTP API contract (${name})`, () => {
    let target: ApiTarget;
    let t: ApiTarget['t'];
    let auth: { authorization: string };
    beforeAll(async () => {
      target = await startTarget();
      t = target.t;
      auth = { authorization: `Bearer ${target.token}` };
    });
    afterAll(() => target?.close());
    beforeEach(async () => {
      await resetQueue(t);
      await target.loggedErrors();
    });

    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      target.request(path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...auth, ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
    const get = (path: string) => target.request(path, { headers: auth });
    const jobCount = async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n as number;

    describe('POST /jobs', () => {
      it('enqueues a job and returns its id as a string', async () => {
        const res = await post('/jobs', { kind: 'noop', payload: { hello: 'world' } });
        expect(res.status).toBe(201);
        const body = await res.json();
        expect(body).toEqual({ id: expect.stringMatching(/^\d+$/), status: 'pending', runAt: expect.any(String) });
        expect(await t.query('SELECT id::text, kind, payload, max_attempts FROM pgdrain.jobs')).toEqual([
          { id: body.id, kind: 'noop', payload: { hello: 'world' }, max_attempts: 3 },
        ]);
      });

      it('honours delaySeconds, runAt and maxAttempts', async () => {
        const delayed = await (
          await post('/jobs', { kind: 'noop', payload: 1, delaySeconds: 120, maxAttempts: 9 })
        ).json();
        const at = '2030-01-02T03:04:05.000Z';
        const scheduled = await (
          await post('/jobs', { kind: 'noop', payload: 2, runAt: '2030-01-02T04:04:05+01:00' })
        ).json();
        expect(scheduled.runAt).toBe(at);
        const rows = await t.query(
          `SELECT id::text, max_attempts, extract(epoch from run_at - now())::int AS wait FROM pgdrain.jobs ORDER BY id`,
        );
        expect(rows[0]).toMatchObject({ id: delayed.id, max_attempts: 9 });
        expect(rows[0]!.wait).toBeGreaterThanOrEqual(118);
        expect(rows[0]!.wait).toBeLessThanOrEqual(120);
        expect(
          (await t.query('SELECT run_at FROM pgdrain.jobs WHERE id = $1', [scheduled.id]))[0]!.run_at.toISOString(),
        ).toBe(at);
      });

      it('stores a priority given one by one and in a batch; the default is 0', async () => {
        const one = await (await post('/jobs', { kind: 'noop', payload: 1, priority: 7 })).json();
        const batch = await (
          await post('/jobs/batch', {
            jobs: [
              { kind: 'noop', payload: 2, priority: -1000 },
              { kind: 'noop', payload: 3 },
            ],
          })
        ).json();
        expect(await t.query('SELECT id::text, priority FROM pgdrain.jobs ORDER BY id')).toEqual([
          { id: one.id, priority: 7 },
          { id: batch.ids[0], priority: -1000 },
          { id: batch.ids[1], priority: 0 },
        ]);
      });

      it('returns the existing job for a key that is still queued', async () => {
        const first = await (await post('/jobs', { kind: 'noop', payload: { v: 1 }, dedupeKey: 'invoice-9' })).json();
        const res = await post('/jobs', { kind: 'noop', payload: { v: 2 }, dedupeKey: 'invoice-9' });
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ id: first.id, status: 'pending', runAt: first.runAt, deduplicated: true });
        expect(await jobCount()).toBe(1);
      });

      it("keeps a group key; dedupeMode 'replace' gives the pending job the new payload; bad ones are 400 and store nothing", async () => {
        const first = await (
          await post('/jobs', {
            kind: 'noop',
            payload: { v: 1 },
            dedupeKey: 'sync-3',
            dedupeMode: 'replace',
            groupKey: 'tenant-3',
          })
        ).json();
        expect((await (await get(`/jobs/${first.id}`)).json()).groupKey).toBe('tenant-3');
        const res = await post('/jobs', {
          kind: 'noop',
          payload: { v: 2 },
          dedupeKey: 'sync-3',
          dedupeMode: 'replace',
          delaySeconds: 60,
        });
        expect(res.status).toBe(200);
        const replaced = await res.json();
        expect(replaced).toMatchObject({ id: first.id, status: 'pending', deduplicated: true, replaced: true });
        expect(Date.parse(replaced.runAt)).toBeGreaterThan(Date.now() + 50_000);
        expect((await (await get(`/jobs/${first.id}`)).json()).payload).toEqual({ v: 2 });
        const batch = await post('/jobs/batch', {
          jobs: [
            { kind: 'noop', payload: 1, groupKey: 'tenant-4' },
            { kind: 'noop', payload: 2, dedupeKey: 'sync-3', dedupeMode: 'replace' },
          ],
        });
        expect(batch.status).toBe(201);
        const { ids } = await batch.json();
        expect(ids[1]).toBe(first.id);
        expect((await (await get(`/jobs/${first.id}`)).json()).payload).toBe(2);
        await expectError(
          await post('/jobs', { kind: 'noop', payload: {}, groupKey: '' }),
          400,
          'invalid_request',
          'groupKey',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: {}, groupKey: 'x'.repeat(201) }),
          400,
          'invalid_request',
          'groupKey',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: {}, dedupeMode: 'replace' }),
          400,
          'invalid_request',
          'dedupeMode needs a dedupeKey',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: {}, dedupeKey: 'k', dedupeMode: 'merge' }),
          400,
          'invalid_request',
          'dedupeMode',
        );
        expect(await jobCount()).toBe(2);
      });

      it('stores SQL-looking strings verbatim', async () => {
        const nasty = '\'); DROP TABLE jobs; -- \\ " $1 \u2028 😀';
        const res = await post('/jobs', { kind: 'noop', payload: { nasty }, dedupeKey: nasty });
        expect(res.status).toBe(201);
        expect(await t.query('SELECT payload, dedupe_key FROM pgdrain.jobs')).toEqual([
          { payload: { nasty }, dedupe_key: nasty },
        ]);
      });

      const bad: [string, unknown, number, string, string][] = [
        ['a missing kind', { payload: {} }, 400, 'invalid_request', 'kind'],
        ['a missing payload', { kind: 'noop' }, 400, 'invalid_request', 'payload'],
        ['a kind of the wrong type', { kind: 42, payload: {} }, 400, 'invalid_request', 'kind'],
        ['a negative delay', { kind: 'noop', payload: {}, delaySeconds: -5 }, 400, 'invalid_request', 'delaySeconds'],
        [
          'runAt and delaySeconds together',
          { kind: 'noop', payload: {}, delaySeconds: 5, runAt: '2030-01-01T00:00:00Z' },
          400,
          'invalid_request',
          'not both',
        ],
        [
          'a runAt that is not ISO-8601',
          { kind: 'noop', payload: {}, runAt: 'tomorrow' },
          400,
          'invalid_request',
          'runAt',
        ],
        ['maxAttempts of 0', { kind: 'noop', payload: {}, maxAttempts: 0 }, 400, 'invalid_request', 'maxAttempts'],
        [
          'maxAttempts over 100',
          { kind: 'noop', payload: {}, maxAttempts: 101 },
          400,
          'invalid_request',
          'maxAttempts',
        ],
        ['an unknown field', { kind: 'noop', payload: {}, urgency: 1 }, 400, 'invalid_request', 'urgency'],
        ['a priority above 1000', { kind: 'noop', payload: {}, priority: 1001 }, 400, 'invalid_request', 'priority'],
        ['a fractional priority', { kind: 'noop', payload: {}, priority: 1.5 }, 400, 'invalid_request', 'priority'],
        ['a body that is an array', [1, 2], 400, 'invalid_request', '(body)'],
        [
          'a NUL character in the payload',
          { kind: 'noop', payload: { a: ['ok', 'b\u0000d'] } },
          400,
          'invalid_request',
          'payload.a[1]',
        ],
        ['an unknown kind', { kind: 'send_fax', payload: {} }, 422, 'unknown_kind', 'send_fax'],
        [
          'a webhook payload without url',
          { kind: 'webhook', payload: { body: 1 } },
          422,
          'invalid_payload',
          'payload.url',
        ],
        [
          'a webhook to a host not allowed',
          { kind: 'webhook', payload: { url: 'http://169.254.169.254/latest' } },
          422,
          'invalid_payload',
          'not in WEBHOOK_ALLOWED_HOSTS',
        ],
        [
          'a webhook to a look-alike host',
          { kind: 'webhook', payload: { url: 'https://example.org.evil.com/' } },
          422,
          'invalid_payload',
          'not in WEBHOOK_ALLOWED_HOSTS',
        ],
        [
          'a webhook with credentials in the URL',
          { kind: 'webhook', payload: { url: 'https://u:p@hooks.example.com/' } },
          422,
          'invalid_payload',
          'credentials',
        ],
        [
          'a webhook with a Host header',
          { kind: 'webhook', payload: { url: 'https://hooks.example.com/', headers: { Host: 'internal' } } },
          422,
          'invalid_payload',
          'set by pgdrain',
        ],
        ...[
          'http://[fe80::1%25eth0]/',
          'http://a%25b/',
          'http://hooks.example.com:99999/',
          'http://[::1',
          'http://a b/',
        ].map((url): [string, unknown, number, string, string] => [
          `a webhook URL that does not parse (${url})`,
          { kind: 'webhook', payload: { url } },
          422,
          'invalid_payload',
          'payload.url: url is not a valid URL',
        ]),
        [
          'a webhook to a port the allow-list does not name',
          { kind: 'webhook', payload: { url: 'https://hooks.example.com:25901/' } },
          422,
          'invalid_payload',
          'port 25901 of host hooks.example.com is not allowed',
        ],
        [
          'a webhook header value with CR LF',
          { kind: 'webhook', payload: { url: 'https://hooks.example.com/', headers: { 'X-A': 'a\r\nX-Injected: 1' } } },
          422,
          'invalid_payload',
          'payload.headers.X-A: a header value holds tabs and visible ASCII (U+0020 to U+007E): no CR, LF, NUL or other control character, nothing above U+007E (percent-encode or base64 other text)',
        ],
        [
          // fetch refuses it at every delivery ("Invalid character in header content"): refused at enqueue instead.
          'a webhook header value with a character above U+007E',
          {
            kind: 'webhook',
            payload: { url: 'https://hooks.example.com/', headers: { 'X-A': 'caf\u00e9 \u2028 \u4e2d' } },
          },
          422,
          'invalid_payload',
          'payload.headers.X-A: a header value holds tabs and visible ASCII (U+0020 to U+007E)',
        ],
        [
          // U+0080 to U+00FF: HTTP's opaque bytes, which fetch and node:http send as UTF-8 (`é` as `Ã©`).
          'a webhook header value with a Latin-1 character',
          { kind: 'webhook', payload: { url: 'https://hooks.example.com/', headers: { 'X-A': 'Jos\u00e9' } } },
          422,
          'invalid_payload',
          'payload.headers.X-A: a header value holds tabs and visible ASCII (U+0020 to U+007E)',
        ],
        [
          "a webhook header that is pgdrain's own",
          { kind: 'webhook', payload: { url: 'https://hooks.example.com/', headers: { 'X-Pgdrain-Job-Id': '1' } } },
          422,
          'invalid_payload',
          'x-pgdrain-* are set by pgdrain',
        ],
        [
          "a timeout longer than its kind allows (a webhook's 10 s)",
          { kind: 'webhook', payload: { url: 'https://hooks.example.com/' }, timeoutMs: 86_400_000 },
          400,
          'invalid_request',
          'timeoutMs: kind webhook allows a job at most 10000 ms',
        ],
      ];
      for (const [what, body, status, code, part] of bad) {
        it(`refuses ${what} with ${status} and stores nothing`, async () => {
          await expectError(await post('/jobs', body), status, code, part);
          expect(await jobCount()).toBe(0);
        });
      }

      it('accepts a webhook to an allowed host and a wildcard subdomain', async () => {
        expect((await post('/jobs', { kind: 'webhook', payload: { url: 'https://hooks.example.com/a' } })).status).toBe(
          201,
        );
        expect(
          (
            await post('/jobs', {
              kind: 'webhook',
              payload: { url: 'https://deep.api.example.org/b', method: 'PUT', body: { x: 1 } },
            })
          ).status,
        ).toBe(201);
        expect(await jobCount()).toBe(2);
      });

      it('refuses malformed JSON with 400', async () => {
        await expectError(await post('/jobs', '{"kind": "noop", payload'), 400, 'malformed_json', 'not valid JSON');
        expect(await jobCount()).toBe(0);
      });

      it('refuses a body that is not JSON with 415', async () => {
        await expectError(
          await post('/jobs', 'kind=noop', { 'content-type': 'application/x-www-form-urlencoded' }),
          415,
          'unsupported_media_type',
          'Content-Type: application/json',
        );
        expect(await jobCount()).toBe(0);
      });

      it('refuses a body over the limit with 413', async () => {
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 'x'.repeat(70 * 1024) }),
          413,
          'body_too_large',
          '65536',
        );
        expect(await jobCount()).toBe(0);
      });

      it.each([
        [
          'a payload nested 5,000 levels deep',
          `{"kind":"noop","payload":${'['.repeat(5000)}${']'.repeat(5000)}}`,
          `payload${'[0]'.repeat(63)}: nested deeper than 64 levels`,
        ],
        [
          'a lone surrogate in a payload string',
          '{"kind":"noop","payload":{"name":"\\ud800"}}',
          'payload.name: contains a lone UTF-16 surrogate',
        ],
        ['a lone surrogate in a key', '{"kind":"noop","payload":{"\\udfff":1}}', 'contains a lone UTF-16 surrogate'],
        [
          'a runAt in year 0',
          JSON.stringify({ kind: 'noop', payload: {}, runAt: '0000-01-01T00:00:00Z' }),
          'runAt: must be between 1970-01-01 and 9999-12-31',
        ],
        // JSON.parse turns it into Infinity: stored, it would not be what was sent.
        [
          'a number JSON cannot hold',
          '{"kind":"noop","payload":{"n":[1,-1e400]}}',
          'payload.n[1]: a number too large for JSON to hold',
        ],
        [
          'a number JSON cannot hold as the payload',
          '{"kind":"noop","payload":1e400}',
          'payload: a number too large for JSON to hold',
        ],
      ])(
        'refuses %s with 400 and stores nothing (PostgreSQL or validation would fail on it)',
        async (_, body, message) => {
          await expectError(await post('/jobs', body), 400, 'invalid_request', message);
          await expectError(await post('/jobs/batch', `{"jobs":[${body}]}`), 400, 'invalid_request');
          expect(await jobCount()).toBe(0);
          expect(await target.loggedErrors()).toEqual([]);
        },
      );

      it('names each broken field once, however many of its rules the value breaks', async () => {
        const res = await post('/jobs', { kind: 'noop', payload: {}, timeoutMs: 1e308 });
        expect(res.status).toBe(400);
        const { error } = (await res.json()) as { error: { message: string } };
        expect(error.message.match(/timeoutMs/g), error.message).toHaveLength(1);
        expect(await jobCount()).toBe(0);
      });
    });

    describe('POST /jobs/batch', () => {
      it('stores every job in one transaction and returns ids in input order', async () => {
        const res = await post('/jobs/batch', {
          jobs: [
            { kind: 'noop', payload: 1 },
            { kind: 'noop', payload: 2, delaySeconds: 60 },
            { kind: 'noop', payload: 3 },
          ],
        });
        expect(res.status).toBe(201);
        const { ids } = await res.json();
        expect(ids).toHaveLength(3);
        const rows = await t.query('SELECT id::text, payload FROM pgdrain.jobs ORDER BY jobs.id');
        expect(rows).toEqual(ids.map((id: string, i: number) => ({ id, payload: i + 1 })));
      });

      it('stores nothing when one job is bad, and names it', async () => {
        await expectError(
          await post('/jobs/batch', {
            jobs: [
              { kind: 'noop', payload: 1 },
              { kind: 'webhook', payload: { url: 'http://localhost:5432' } },
            ],
          }),
          422,
          'invalid_payload',
          'jobs[1]',
        );
        await expectError(
          await post('/jobs/batch', { jobs: [{ kind: 'noop', payload: 1 }, { kind: 'noop' }] }),
          400,
          'invalid_request',
          'jobs[1].payload',
        );
        expect(await jobCount()).toBe(0);
      });

      it('refuses an empty batch and one over 1000 jobs', async () => {
        await expectError(await post('/jobs/batch', { jobs: [] }), 400, 'invalid_request', 'jobs');
        await expectError(
          await post('/jobs/batch', { jobs: Array.from({ length: 1001 }, () => ({ kind: 'noop', payload: 0 })) }),
          400,
          'invalid_request',
          'jobs',
        );
        expect(await jobCount()).toBe(0);
      });
    });

    describe('reading and repairing jobs', () => {
      async function deadJob(): Promise<string> {
        const [row] = await t.query(
          `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error) VALUES ('noop', '{"d":1}', 'dead', 3, 3, 'boom') RETURNING id::text`,
        );
        return row!.id;
      }

      it('GET /jobs/:id returns the job; 404 for an unknown one; 400 for a malformed id', async () => {
        const { id } = await (await post('/jobs', { kind: 'noop', payload: { a: 1 } })).json();
        const res = await get(`/jobs/${id}`);
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({
          id,
          kind: 'noop',
          payload: { a: 1 },
          status: 'pending',
          attempts: 0,
          maxAttempts: 3,
          priority: 0,
          groupKey: null,
          dedupeKey: null,
          runAt: expect.any(String),
          lockedAt: null,
          lockedBy: null,
          lastError: null,
          createdAt: expect.any(String),
          finishedAt: null,
          result: null,
          progress: null,
          cancelRequested: false,
          waitingFor: null,
          timeoutMs: null,
          version: 1,
          held: null,
          attemptLog: [],
          dependsOn: [],
          dependents: [],
        });
        await expectError(await get('/jobs/999999999'), 404, 'not_found', 'does not exist');
        await expectError(await get('/jobs/abc'), 400, 'invalid_id');
        await expectError(await get('/jobs/99999999999999999999999'), 400, 'invalid_id');
      });

      it('GET /jobs/:id gives back a payload as it was sent, also a string that reads as JSON', async () => {
        const payloads = ['123', 'true', '{"a":1}', 'null', 42, null, ['x']];
        const ids: string[] = [];
        for (const payload of payloads) ids.push((await (await post('/jobs', { kind: 'noop', payload })).json()).id);
        for (const [i, id] of ids.entries())
          expect((await (await get(`/jobs/${id}`)).json()).payload).toEqual(payloads[i]);
      });

      it('GET /jobs lists newest first, filters by status and kind, and pages with a cursor', async () => {
        const ids: string[] = (
          await (
            await post('/jobs/batch', { jobs: Array.from({ length: 5 }, (_, i) => ({ kind: 'noop', payload: i })) })
          ).json()
        ).ids;
        const dead = await deadJob();
        const page1 = await (await get('/jobs?status=pending&limit=2')).json();
        expect(page1.jobs.map((j: { id: string }) => j.id)).toEqual([ids[4], ids[3]]);
        const page2 = await (await get(`/jobs?status=pending&limit=2&cursor=${page1.nextCursor}`)).json();
        expect(page2.jobs.map((j: { id: string }) => j.id)).toEqual([ids[2], ids[1]]);
        const page3 = await (await get(`/jobs?status=pending&limit=2&cursor=${page2.nextCursor}`)).json();
        expect(page3).toEqual({ jobs: [expect.objectContaining({ id: ids[0] })], nextCursor: null });
        const deadList = await (await get('/jobs?status=dead&kind=noop')).json();
        expect(deadList.jobs.map((j: { id: string; lastError: string }) => [j.id, j.lastError])).toEqual([
          [dead, 'boom'],
        ]);
        await expectError(await get('/jobs?status=finished'), 400, 'invalid_request', 'query.status');
        await expectError(await get('/jobs?limit=501'), 400, 'invalid_request', 'query.limit');
        await expectError(await get('/jobs?cursor=xyz'), 400, 'invalid_request', 'query.cursor');
      });

      it("GET /jobs/:id tells a job's story: each failed or lost attempt with its drainer and error, what it waits for and what waits for it", async () => {
        const enqueued = await post('/jobs', { kind: 'noop', payload: { orderId: 7 }, dedupeKey: 'order-7' });
        const { id } = await enqueued.json();
        const child = (await (await post('/jobs', { kind: 'noop', payload: 1, after: [id] })).json()).id;
        const claimOne = async (lockToken: string) => {
          await t.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [id]);
          const [job] = await claim(t.db, { batchSize: 1, lockToken, kinds: ['noop'] });
          expect(job?.id).toBe(id);
          return job!;
        };
        // The statements a drain settles with: a failed attempt, then one whose drainer went away.
        const first = await claimOne('checkout-drainer:1');
        expect(await fail(t.db, first, { error: 'Error: card declined\n    at charge (jobs.ts:3:9)' })).toMatchObject({
          outcome: 'retry',
        });
        await claimOne('other-drainer:2');
        await t.query(`UPDATE pgdrain.jobs SET locked_until = now() - interval '1 second' WHERE id = $1`, [id]);
        expect((await reap(t.db)).reclaimed).toEqual([id]);
        const shown = await (await get(`/jobs/${id}`)).json();
        expect(shown).toMatchObject({ status: 'pending', attempts: 1, dedupeKey: 'order-7', dependsOn: [] });
        expect(shown.attemptLog).toEqual([
          {
            attempt: 1,
            outcome: 'failed',
            startedAt: expect.any(String),
            endedAt: expect.any(String),
            drainer: 'checkout-drainer:1',
            error: 'Error: card declined\n    at charge (jobs.ts:3:9)',
          },
          {
            attempt: 2,
            outcome: 'lost',
            startedAt: expect.any(String),
            endedAt: expect.any(String),
            drainer: 'other-drainer:2',
            error: expect.stringContaining('visibility timeout: other-drainer:2 held the job past its lease'),
          },
        ]);
        for (const entry of shown.attemptLog)
          expect(Date.parse(entry.startedAt)).toBeLessThanOrEqual(Date.parse(entry.endedAt));
        expect(shown.dependents).toEqual([{ id: child, kind: 'noop', status: 'waiting' }]);
        expect((await (await get(`/jobs/${child}`)).json()).dependsOn).toEqual([
          { id, kind: 'noop', status: 'pending' },
        ]);
        // The log keeps the latest attempts: at its bound, the oldest goes.
        await t.query(
          `UPDATE pgdrain.jobs SET attempt_log = (SELECT jsonb_agg(jsonb_build_object('attempt', n, 'outcome', 'failed',
             'startedAt', now(), 'endedAt', now(), 'drainer', 'old', 'error', 'old ' || n)) FROM generate_series(1, $2::int) n)
           WHERE id = $1`,
          [id, MAX_ATTEMPT_LOG],
        );
        await fail(t.db, await claimOne('checkout-drainer:3'), { error: 'the newest' });
        const log = (await (await get(`/jobs/${id}`)).json()).attemptLog;
        expect(log).toHaveLength(MAX_ATTEMPT_LOG);
        expect([log[0].error, log.at(-1).error]).toEqual(['old 2', 'the newest']);
        // A list shows neither the log nor the links.
        const listed = (await (await get('/jobs?kind=noop&status=pending')).json()).jobs[0];
        expect(listed).toMatchObject({ id, dedupeKey: 'order-7' });
        expect(Object.keys(listed)).not.toContain('attemptLog');
      });

      it('GET /jobs finds jobs by dedupe key, group key and a payload field; a payload search never matches a kind that hides part of its payload', async () => {
        const id = async (job: Record<string, unknown>) => (await (await post('/jobs', job)).json()).id as string;
        const order = await id({ kind: 'noop', payload: { orderId: 42, total: 9 }, dedupeKey: 'ord-42' });
        const grouped = await id({
          kind: 'noop',
          payload: { orderId: 43, lines: [{ sku: 'a' }] },
          groupKey: 'customer-1',
        });
        await id({
          kind: 'webhook',
          payload: { url: 'https://hooks.example.com/a', headers: { Authorization: 'Bearer s3cret' }, orderId: 42 },
        });
        const found = async (query: string) =>
          (await (await get(`/jobs?${query}`)).json()).jobs.map((j: { id: string }) => j.id);
        const payload = (json: unknown) => `payload=${encodeURIComponent(JSON.stringify(json))}`;
        expect(await found('dedupeKey=ord-42')).toEqual([order]);
        expect(await found('groupKey=customer-1')).toEqual([grouped]);
        expect(await found(payload({ orderId: 42 }))).toEqual([order]);
        expect(await found(payload({ lines: [{ sku: 'a' }] }))).toEqual([grouped]);
        expect(await found(`${payload({ orderId: 43 })}&status=dead`)).toEqual([]);
        // The webhook's headers are hidden from readers: no search can tell what they hold.
        expect(await found(payload({ headers: { Authorization: 'Bearer s3cret' } }))).toEqual([]);
        for (const bad of [
          '[1]',
          '42',
          'not json',
          '{"a":"\\u0000"}',
          '{"a":"\\ud800"}',
          `{"a":"${'x'.repeat(2000)}"}`,
        ])
          await expectError(
            await get(`/jobs?payload=${encodeURIComponent(bad)}`),
            400,
            'invalid_request',
            'query.payload',
          );
        await expectError(await get('/jobs?dedupeKey='), 400, 'invalid_request', 'query.dedupeKey');
      });

      it('POST /jobs/:id/retry revives a dead job with attempts reset; 409 for one that is not dead', async () => {
        const dead = await deadJob();
        const res = await post(`/jobs/${dead}/retry`, {});
        expect(res.status).toBe(200);
        expect(await res.json()).toMatchObject({ id: dead, status: 'pending', attempts: 0, lastError: 'boom' });
        expect(
          await t.query('SELECT status, attempts, run_at <= now() AS due FROM pgdrain.jobs WHERE id = $1', [dead]),
        ).toEqual([{ status: 'pending', attempts: 0, due: true }]);
        await expectError(await post(`/jobs/${dead}/retry`, {}), 409, 'not_dead', 'pending');
        await expectError(await post('/jobs/424242/retry', {}), 404, 'not_found');
      });

      it('DELETE /jobs/:id removes a pending or dead job, refuses a running one', async () => {
        const dead = await deadJob();
        const { id: pending } = await (await post('/jobs', { kind: 'noop', payload: 1 })).json();
        const { id: running } = await (await post('/jobs', { kind: 'noop', payload: 2 })).json();
        await t.query(
          `UPDATE pgdrain.jobs SET status = 'running', locked_at = now(), locked_by = 'w:1' WHERE id = $1`,
          [running],
        );
        const del = (id: string) => target.request(`/jobs/${id}`, { method: 'DELETE', headers: auth });
        expect((await del(dead)).status).toBe(204);
        expect((await del(pending)).status).toBe(204);
        await expectError(await del(running), 409, 'running');
        await expectError(await del(pending), 404, 'not_found');
        expect(await t.query('SELECT id::text, status FROM pgdrain.jobs')).toEqual([
          { id: running, status: 'running' },
        ]);
      });

      it('GET /stats counts by kind and status and reports the oldest ready age', async () => {
        await post('/jobs/batch', {
          jobs: [
            { kind: 'noop', payload: 1 },
            { kind: 'noop', payload: 2, delaySeconds: 300 },
            { kind: 'webhook', payload: { url: 'https://hooks.example.com' } },
          ],
        });
        await deadJob();
        await t.query(`UPDATE pgdrain.jobs SET run_at = now() - interval '30 seconds' WHERE kind = 'webhook'`);
        await claim(t.db, { batchSize: 1, lockToken: 'w:1', kinds: ['webhook'] });
        await t.query(
          `UPDATE pgdrain.jobs SET run_at = now() - interval '10 seconds' WHERE kind = 'noop' AND status = 'pending' AND run_at <= now()`,
        );
        const res = await get('/stats');
        expect(res.status).toBe(200);
        const body = await res.json();
        expect(body.kinds).toEqual({
          noop: {
            pending: 2,
            ready: 1,
            delayed: 1,
            running: 0,
            dead: 1,
            waiting: 0,
            oldestReadySeconds: expect.any(Number),
            paused: false,
            held: 0,
          },
          webhook: {
            pending: 0,
            ready: 0,
            delayed: 0,
            running: 1,
            dead: 0,
            waiting: 0,
            oldestReadySeconds: null,
            paused: false,
            held: 0,
          },
        });
        expect(body.kinds.noop.oldestReadySeconds).toBeGreaterThanOrEqual(10);
        expect(body.kinds.noop.oldestReadySeconds).toBeLessThan(15);
        expect(body.oldestReadySeconds).toBe(body.kinds.noop.oldestReadySeconds);
      });
    });

    describe("a job's life: waiting for others, a timeout of its own, waiting for it, cancelling it", () => {
      const insert = async (columns: string) =>
        (
          await t.query(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, locked_by, locked_at, finished_at, result, progress)
                        VALUES ${columns} RETURNING id::text`)
        )[0]!.id as string;

      it('POST /jobs with after waits for existing jobs; an unknown id is a 400 naming it and stores nothing; timeoutMs is bounded', async () => {
        const parent = (await (await post('/jobs', { kind: 'noop', payload: 1 })).json()).id;
        const child = await post('/jobs', { kind: 'noop', payload: 2, after: [parent], timeoutMs: 5_000 });
        expect(child.status).toBe(201);
        expect(await child.json()).toMatchObject({ status: 'waiting' });
        const before = await jobCount();
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 3, after: [parent, '987654321'] }),
          400,
          'unknown_dependency',
          '987654321',
        );
        await expectError(
          await post('/jobs/batch', {
            jobs: [
              { kind: 'noop', payload: 4 },
              { kind: 'noop', payload: 5, after: ['987654321'] },
            ],
          }),
          400,
          'unknown_dependency',
          'jobs: ',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 6, after: ['x'] }),
          400,
          'invalid_request',
          'after[0]',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 7, after: [] }),
          400,
          'invalid_request',
          'after',
        );
        // An id past PostgreSQL's bigint is no job id: refused as one, never sent to the database.
        for (const path of ['/jobs', '/jobs/batch']) {
          const job = { kind: 'noop', payload: 7, after: ['9223372036854775808'] };
          await expectError(
            await post(path, path === '/jobs' ? job : { jobs: [job] }),
            400,
            'invalid_request',
            'after[0]: must be a job id',
          );
        }
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 8, timeoutMs: 99 }),
          400,
          'invalid_request',
          'timeoutMs',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 9, after: [parent], dedupeKey: 'k' }),
          422,
          'invalid_option',
          'dedupe key',
        );
        expect(await jobCount()).toBe(before);
        const shown = await (
          await get(`/jobs/${(await (await post('/jobs', { kind: 'noop', payload: 10, after: [parent] })).json()).id}`)
        ).json();
        expect(shown).toMatchObject({ status: 'waiting', waitingFor: 1, timeoutMs: null });
      });

      it("a database that refuses an enqueue: an error in the contract's shape, and no log line holds the webhook's secret header, its body or the statement", async () => {
        await t.query(`CREATE OR REPLACE FUNCTION public.contract_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                       BEGIN RAISE EXCEPTION 'refused by the test'; END $$`);
        await t.query(`CREATE TRIGGER contract_refuse BEFORE INSERT ON pgdrain.jobs
                       FOR EACH ROW EXECUTE FUNCTION public.contract_refuse()`);
        try {
          const res = await post('/jobs', {
            kind: 'webhook',
            payload: {
              url: 'https://hooks.example.com/x',
              headers: { Authorization: 'Bearer RECEIVER-SECRET-HDR-42' },
              body: { note: 'BODY-SECRET-43' },
            },
          });
          expect(res.status).toBe(500);
          const text = await res.text();
          expect(text).not.toMatch(/RECEIVER-SECRET|BODY-SECRET|insert into/i);
          const lines = await until(
            () => target.loggedErrors(),
            (logged) => logged.length > 0,
            5_000,
            'the failure to be logged',
          );
          expect(lines.join('\n')).toContain('refused by the test');
          expect(lines.join('\n')).not.toMatch(/RECEIVER-SECRET|BODY-SECRET|insert into|params:/i);
        } finally {
          await t.query('DROP TRIGGER contract_refuse ON pgdrain.jobs');
        }
      });

      it("POST /events with its sender's id: a repeat answers the first event's id and sends nothing", async () => {
        const first = await post('/events', { event: 'contract.hook', key: 'k', payload: { n: 1 }, id: 'evt_1' });
        expect(first.status).toBe(201);
        const { id } = (await first.json()) as { id: string };
        const again = await post('/events', { event: 'contract.hook', key: 'k', payload: { n: 2 }, id: 'evt_1' });
        expect(await again.json()).toEqual({ id, event: 'contract.hook', key: 'k' });
        expect(
          await t.query(`SELECT payload FROM pgdrain.events WHERE event = 'contract.hook' AND sender_id = 'evt_1'`),
        ).toEqual([{ payload: { n: 1 } }]);
        await expectError(
          await post('/events', { event: 'contract.hook', key: 'k', id: '' }),
          400,
          'invalid_request',
          'id',
        );
        await t.query(`DELETE FROM pgdrain.events WHERE event = 'contract.hook'`);
      });

      it('GET /jobs/:id?waitSeconds answers a finished job at once, a live one when the time is up, and refuses a wait out of range', async () => {
        const dead = await insert(`('noop', '{}', 'dead', 3, NULL, NULL, now(), NULL, NULL)`);
        let started = Date.now();
        expect(await (await get(`/jobs/${dead}?waitSeconds=30`)).json()).toMatchObject({ id: dead, status: 'dead' });
        expect(Date.now() - started).toBeLessThan(2_000);
        const pending = (await (await post('/jobs', { kind: 'noop', payload: 1 })).json()).id;
        started = Date.now();
        expect(await (await get(`/jobs/${pending}?waitSeconds=1`)).json()).toMatchObject({
          id: pending,
          status: 'pending',
        });
        expect(Date.now() - started).toBeGreaterThanOrEqual(950);
        for (const bad of ['0', '61', '1.5', 'soon'])
          await expectError(
            await get(`/jobs/${pending}?waitSeconds=${bad}`),
            400,
            'invalid_request',
            'query.waitSeconds',
          );
        await expectError(await get('/jobs/987654321?waitSeconds=1'), 404, 'not_found');
      });

      it('a kept job shows its result, progress and finish time; GET /jobs lists completed and cancelled ones', async () => {
        const done = await insert(`('noop', '{}', 'completed', 1, NULL, NULL, now(), '{"total": 3}', '{"step": 3}')`);
        const stopped = await insert(`('noop', '{}', 'cancelled', 1, NULL, NULL, now(), NULL, NULL)`);
        expect(await (await get(`/jobs/${done}`)).json()).toMatchObject({
          status: 'completed',
          result: { total: 3 },
          progress: { step: 3 },
          finishedAt: expect.any(String),
          cancelRequested: false,
        });
        expect((await (await get('/jobs?status=completed')).json()).jobs.map((j: { id: string }) => j.id)).toEqual([
          done,
        ]);
        expect((await (await get('/jobs?status=cancelled')).json()).jobs.map((j: { id: string }) => j.id)).toEqual([
          stopped,
        ]);
        // History is not the queue: /stats counts live jobs only.
        expect((await (await get('/stats')).json()).kinds).toEqual({});
      });

      it('POST /jobs/:id/cancel: pending 200, running 202 (asked to stop), completed or dead 409, unknown 404, malformed 400', async () => {
        const pending = (await (await post('/jobs', { kind: 'noop', payload: 1 })).json()).id;
        const res = await post(`/jobs/${pending}/cancel`, undefined);
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ id: pending, status: 'cancelled', cancelRequested: true });
        expect(await t.query('SELECT id FROM pgdrain.jobs WHERE id = $1', [pending])).toEqual([]); // noop keeps nothing
        const running = await insert(`('noop', '{}', 'running', 1, 'elsewhere:1', now(), NULL, NULL, NULL)`);
        const asked = await post(`/jobs/${running}/cancel`, undefined);
        expect(asked.status).toBe(202);
        expect(await asked.json()).toEqual({ id: running, status: 'running', cancelRequested: true });
        expect(await (await get(`/jobs/${running}`)).json()).toMatchObject({
          status: 'running',
          cancelRequested: true,
        });
        const completed = await insert(`('noop', '{}', 'completed', 1, NULL, NULL, now(), NULL, NULL)`);
        await expectError(await post(`/jobs/${completed}/cancel`, undefined), 409, 'not_cancellable', 'is completed');
        const dead = await insert(`('noop', '{}', 'dead', 3, NULL, NULL, now(), NULL, NULL)`);
        await expectError(await post(`/jobs/${dead}/cancel`, undefined), 409, 'not_cancellable', 'is dead');
        await expectError(await post('/jobs/987654321/cancel', undefined), 404, 'not_found');
        await expectError(await post('/jobs/abc/cancel', undefined), 400, 'invalid_id');
        expect(await t.query('SELECT status FROM pgdrain.jobs WHERE id = $1', [dead])).toEqual([{ status: 'dead' }]);
      });
    });

    describe('pausing kinds and bulk actions on dead jobs', () => {
      it('GET /kinds lists the kinds the drainers wrote, who wrote each and when, and whether this one has it', async () => {
        await t.query('DELETE FROM pgdrain.kinds');
        expect(await (await get('/kinds')).json()).toEqual({ kinds: [] });
        const columns = { maxAttempts: 5 };
        await writeKinds(
          t.db,
          [
            { kind: 'noop', version: 1, columns, options: { maxAttempts: 5 }, code: { 1: 'a' } },
            { kind: 'elsewhere', version: 2, columns, options: { maxAttempts: 5, concurrency: 2 }, code: { 2: 'b' } },
          ],
          'drainer-7',
        );
        const res = await get('/kinds');
        expect(res.status).toBe(200);
        const body = await res.json();
        expect(body).toEqual({
          kinds: [
            {
              kind: 'elsewhere',
              version: 2,
              options: { maxAttempts: 5, concurrency: 2 },
              writtenBy: 'drainer-7',
              writtenAt: expect.any(String),
              registeredHere: false,
            },
            {
              kind: 'noop',
              version: 1,
              options: { maxAttempts: 5 },
              writtenBy: 'drainer-7',
              writtenAt: expect.any(String),
              registeredHere: true,
            },
          ],
        });
        expect(Math.abs(Date.parse(body.kinds[0].writtenAt) - Date.now())).toBeLessThan(60_000);
        await t.query('DELETE FROM pgdrain.kinds');
      });

      it('POST /kinds/:kind/pause and /resume set and clear the pause for every drainer; /stats shows it; unknown kind 404', async () => {
        const paused = await post('/kinds/noop/pause', undefined);
        expect(paused.status).toBe(200);
        expect(await paused.json()).toEqual({ kind: 'noop', paused: true });
        expect((await post('/kinds/noop/pause', undefined)).status).toBe(200); // idempotent
        expect(await t.query('SELECT kind FROM pgdrain.paused_kinds')).toEqual([{ kind: 'noop' }]);
        expect((await (await get('/stats')).json()).kinds.noop).toMatchObject({ pending: 0, paused: true });
        // Enqueueing a paused kind still works.
        expect((await post('/jobs', { kind: 'noop', payload: {} })).status).toBe(201);
        expect(await (await post('/kinds/noop/resume', undefined)).json()).toEqual({ kind: 'noop', paused: false });
        expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.paused_kinds')).toEqual([{ n: 0 }]);
        await expectError(
          await post('/kinds/send_fax/pause', undefined),
          404,
          'not_found',
          'unknown job kind "send_fax"',
        );
        // A kind this process has no handler for but the queue holds (another pool's) can be paused.
        await t.query(`INSERT INTO pgdrain.jobs (kind, payload) VALUES ('fax', '{}')`);
        expect(await (await post('/kinds/fax/pause', undefined)).json()).toEqual({ kind: 'fax', paused: true });
        expect(await (await post('/kinds/fax/resume', undefined)).json()).toEqual({ kind: 'fax', paused: false });
        expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.paused_kinds')).toEqual([{ n: 0 }]);
      });

      it('retry-dead and delete-dead act on exactly the dead jobs of the kind asked for, in batches, beside concurrent enqueues', async () => {
        await t.query(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error)
                       SELECT CASE WHEN i % 2 = 0 THEN 'noop' ELSE 'webhook' END, jsonb_build_object('i', i), 'dead', 3, 3, 'boom'
                         FROM generate_series(1, 10000) AS i`);
        const live = await (
          await post('/jobs/batch', {
            jobs: Array.from({ length: 20 }, (_, i) => ({ kind: 'noop', payload: { live: i } })),
          })
        ).json();
        // Enqueues keep arriving while the bulk actions run.
        const during = Promise.all(
          Array.from({ length: 20 }, (_, i) => post('/jobs', { kind: 'noop', payload: { during: i } })),
        );
        const retried = await post('/jobs/retry-dead', { kind: 'noop' });
        expect(retried.status).toBe(200);
        expect(await retried.json()).toEqual({ retried: 5000, done: true });
        const deleted = await post('/jobs/delete-dead', { kind: 'webhook' });
        expect(await deleted.json()).toEqual({ deleted: 5000, done: true });
        expect((await Promise.all(await during)).map((r) => r.status)).toEqual(Array(20).fill(201));
        expect(
          await t.query(
            `SELECT kind, status, attempts, count(*)::int AS n FROM pgdrain.jobs GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
          ),
        ).toEqual([{ kind: 'noop', status: 'pending', attempts: 0, n: 5000 + 20 + 20 }]);
        expect(
          await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE id = ANY($1::bigint[])`, [live.ids]),
        ).toEqual([{ n: 20 }]);
        // Nothing dead is left to act on; no body means every kind.
        expect(await (await target.request('/jobs/retry-dead', { method: 'POST', headers: auth })).json()).toEqual({
          retried: 0,
          done: true,
        });
        await expectError(await post('/jobs/delete-dead', { kind: 'noop', extra: 1 }), 400, 'invalid_request', 'extra');
      });
    });

    describe('auth, health and errors', () => {
      it('GET /healthz needs no token', async () => {
        const res = await target.request('/healthz');
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ ok: true });
      });

      it('refuses a missing or wrong token with 401 and changes nothing', async () => {
        const noToken = await target.request('/jobs', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'noop', payload: 1 }),
        });
        await expectError(noToken, 401, 'unauthorized', 'Authorization: Bearer');
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 1 }, { authorization: `Bearer ${target.token}x` }),
          401,
          'unauthorized',
          'wrong',
        );
        await expectError(
          await post('/jobs', { kind: 'noop', payload: 1 }, { authorization: target.token }),
          401,
          'unauthorized',
        );
        await expectError(await target.request('/stats'), 401, 'unauthorized');
        expect(await jobCount()).toBe(0);
      });

      it('unknown routes get a JSON 404', async () => {
        await expectError(await get('/nope'), 404, 'not_found');
      });

      it('a known route with another method gets 405 and the methods it has; OPTIONS gets them with 204', async () => {
        const put = await target.request('/jobs', { method: 'PUT', headers: auth });
        await expectError(put, 405, 'method_not_allowed', 'PUT is not allowed on /jobs');
        expect(put.headers.get('allow')).toBe('POST, GET, HEAD, OPTIONS');
        const patch = await target.request('/jobs/12', { method: 'PATCH', headers: auth });
        await expectError(patch, 405, 'method_not_allowed');
        expect(patch.headers.get('allow')).toBe('GET, HEAD, DELETE, OPTIONS');
        const batch = await target.request('/jobs/batch', { method: 'PUT', headers: auth });
        expect([batch.status, batch.headers.get('allow')]).toEqual([405, 'POST, OPTIONS']);
        const options = await target.request('/jobs', { method: 'OPTIONS', headers: auth });
        expect([options.status, options.headers.get('allow')]).toEqual([204, 'POST, GET, HEAD, OPTIONS']);
        expect(await jobCount()).toBe(0);
      });
    });
  });
}
