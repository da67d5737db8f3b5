// Every door to the queue treated alike, written once and run on every driver (node-postgres in
// Node, neon-serverless and node-postgres through Hyperdrive in workerd). A drainer writes its kinds
// to pgdrain.kinds when it starts (registerKinds); a job enqueued by the kind's name alone — from
// SQL (pgdrain.enqueue()), from code without the definition (enqueue / enqueueMany by name) — then
// gets the row a typed enqueue writes, and so does one enqueued over HTTP. One case per option a
// kind defines: the same row by every door, and, for what applies when a job runs (backoff,
// timeout), the same outcome.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../../src/drain/index.ts';
import { enqueue, enqueueMany } from '../../src/jobs/enqueue.ts';
import { type JobDefinition, JobRegistry, defineJob } from '../../src/jobs/registry.ts';
import { createApp } from '../../src/http/app.ts';
import { listKinds } from '../../src/queries/index.ts';
import { registerKinds } from '../../src/runtime/core.ts';
import { type Harness, resetQueue } from '../support/harness.ts';

/** The columns a kind's definition decides (and that no door may decide differently). */
const COLUMNS = 'max_attempts, priority, visibility_seconds, keep_seconds, version, timeout_ms, status';
const TOKEN = 'kind-doors-token';

export function kindDoorsSuite(name: string, createHarness: () => Promise<Harness>) {
  describe(`every door to the queue gets the kind's options (${name})`, () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h, ['pgdrain.kinds']);
    });

    const kind = (options: Partial<JobDefinition<{ n: number }>>, handler = (_p: { n: number }) => {}) =>
      defineJob<{ n: number }>({ kind: 'doors', schema: z.object({ n: z.number() }), handler, ...options });
    const rowOf = async (id: string) =>
      (await h.query(`SELECT ${COLUMNS} FROM pgdrain.jobs_and_history WHERE id = $1`, [id]))[0]!;

    /** One job of `definition` enqueued by each door, after a drainer with it registered its kinds;
     * returns their ids by door. */
    async function byEveryDoor(definition: JobDefinition<{ n: number }>) {
      const registry = new JobRegistry([definition]);
      await registerKinds(h.db, registry, 'doors-test');
      const app = createApp({ withDb: (fn) => fn(h.db), registry, apiToken: TOKEN });
      const response = await app.request('/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ kind: 'doors', payload: { n: 4 } }),
      });
      expect(response.status).toBe(201);
      const [sqlRow] = await h.query<{ id: string }>(`SELECT pgdrain.enqueue('doors', '{"n": 3}'::jsonb)::text AS id`);
      const [many] = await enqueueMany(h.db, [{ kind: 'doors', payload: { n: 5 } }]);
      return {
        typed: (await enqueue(h.db, definition, { n: 1 })).id,
        byName: (await enqueue(h.db, { kind: 'doors', payload: { n: 2 } })).id,
        sql: sqlRow!.id,
        http: ((await response.json()) as { id: string }).id,
        byNameMany: many!.id,
      };
    }

    /** Each door's row, beside the typed enqueue's. */
    async function expectSameRows(ids: Record<string, string>, expected: Record<string, unknown>) {
      const typed = await rowOf(ids.typed!);
      expect(typed).toMatchObject(expected);
      for (const [door, id] of Object.entries(ids)) expect({ door, ...(await rowOf(id)) }).toEqual({ door, ...typed });
    }

    it.each([
      ['maxAttempts', { maxAttempts: 7 }, { max_attempts: 7 }],
      ['priority', { priority: 25 }, { priority: 25 }],
      ['keepCompletedSeconds', { keepCompletedSeconds: 86_400 }, { keep_seconds: 86_400 }],
      ['visibilityTimeoutSeconds', { visibilityTimeoutSeconds: 900 }, { visibility_seconds: 900 }],
      ['version', { version: 3 }, { version: 3 }],
      ['none of them (the defaults)', {}, { max_attempts: 3, priority: 0, keep_seconds: null, version: null }],
    ] as const)(
      '%s: SQL, by name, one of many by name, HTTP and typed write the same row',
      async (_, options, expected) => {
        await expectSameRows(await byEveryDoor(kind(options)), expected);
      },
    );

    it("what a caller sets wins over the kind's: SQL and by-name options are kept as given", async () => {
      await registerKinds(h.db, new JobRegistry([kind({ maxAttempts: 7, priority: 25 })]), 'doors-test');
      const [sqlRow] = await h.query<{ id: string }>(
        `SELECT pgdrain.enqueue('doors', '{}'::jsonb, max_attempts => 2, priority => -5)::text AS id`,
      );
      const byName = await enqueue(h.db, { kind: 'doors', payload: {}, maxAttempts: 2, priority: -5 });
      for (const id of [sqlRow!.id, byName.id])
        expect(await rowOf(id)).toMatchObject({ max_attempts: 2, priority: -5 });
    });

    it('a kind no drainer defined gets the defaults by every door, as before', async () => {
      const [sqlRow] = await h.query<{ id: string }>(`SELECT pgdrain.enqueue('nobody', '{}'::jsonb)::text AS id`);
      const byName = await enqueue(h.db, { kind: 'nobody', payload: {} });
      const [many] = await enqueueMany(h.db, [{ kind: 'nobody', payload: {} }]);
      for (const id of [sqlRow!.id, byName.id, many!.id])
        expect(await rowOf(id)).toEqual({
          max_attempts: 3,
          priority: 0,
          visibility_seconds: null,
          keep_seconds: null,
          version: null,
          timeout_ms: null,
          status: 'pending',
        });
    });

    it('backoff: a job that failed by any door waits what the kind says before its next attempt', async () => {
      const definition = kind({ maxAttempts: 2, backoff: { baseSeconds: 600, capSeconds: 600 } }, () => {
        throw new Error('not yet');
      });
      const ids = await byEveryDoor(definition);
      const report = await drain(h.db, new JobRegistry([definition]), { workerId: 'doors', batchSize: 10 });
      expect(report).toMatchObject({ claimed: 5, failed: 5 });
      const rows = await h.query<{ id: string; status: string; attempts: number; waits: number }>(
        `SELECT id::text, status, attempts, extract(epoch from run_at - now())::float8 AS waits FROM pgdrain.jobs
          WHERE id = ANY($1::bigint[]) ORDER BY id`,
        [Object.values(ids)],
      );
      expect(rows).toHaveLength(5);
      for (const row of rows) {
        expect(row).toMatchObject({ status: 'pending', attempts: 1 });
        // 600 s with its jitter (half to all of it); the drainer's default would be 1 s.
        expect(row.waits).toBeGreaterThan(290);
        expect(row.waits).toBeLessThanOrEqual(600);
      }
    });

    it("timeoutMs: a handler that runs too long is stopped at the kind's timeout by any door", async () => {
      const definition = kind({ maxAttempts: 1, timeoutMs: 100 }, async (_p) => {
        await new Promise((resolve) => setTimeout(resolve, 5_000));
      });
      const ids = await byEveryDoor(definition);
      const report = await drain(h.db, new JobRegistry([definition]), {
        workerId: 'doors',
        batchSize: 10,
        concurrency: 5,
      });
      expect(report).toMatchObject({ claimed: 5, dead: 5 });
      const rows = await h.query<{ last_error: string }>(
        `SELECT last_error FROM pgdrain.jobs WHERE id = ANY($1::bigint[])`,
        [Object.values(ids)],
      );
      expect(rows).toHaveLength(5);
      for (const row of rows) expect(row.last_error).toMatch(/timed out after 100 ms/);
    });

    it('the newest definition applies, and the write says what it replaced, once', async () => {
      const first = await registerKinds(h.db, new JobRegistry([kind({ maxAttempts: 4 })]), 'old-replica');
      expect(first.replaced).toEqual([]);
      // The same definition again (a restart, another replica of the same deploy): nothing to say.
      expect(
        (await registerKinds(h.db, new JobRegistry([kind({ maxAttempts: 4 })]), 'old-replica-2')).replaced,
      ).toEqual([]);
      const second = await registerKinds(h.db, new JobRegistry([kind({ maxAttempts: 6, priority: 9 })]), 'new-replica');
      expect(second.replaced).toEqual([
        {
          kind: 'doors',
          writtenBy: 'old-replica-2',
          writtenAt: expect.any(Date),
          differences: ['maxAttempts 4 → 6', 'priority unset → 9'],
        },
      ]);
      const [stored] = await listKinds(h.db);
      expect(stored).toMatchObject({
        kind: 'doors',
        writtenBy: 'new-replica',
        version: 1,
        columns: { maxAttempts: 6, priority: 9 },
        options: { maxAttempts: 6, priority: 9 },
      });
      const [sqlRow] = await h.query<{ id: string }>(`SELECT pgdrain.enqueue('doors', '{}'::jsonb)::text AS id`);
      expect(await rowOf(sqlRow!.id)).toMatchObject({ max_attempts: 6, priority: 9 });
    });
  });
}
