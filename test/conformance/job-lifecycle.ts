// A job's whole life, written once and run on every driver (node-postgres in Node, neon-serverless
// and node-postgres through Hyperdrive inside workerd): results kept and pruned, cancellation
// (before and while it runs), progress, dependencies, transactional handlers, a timeout per job.
// The same through real sidecar processes and the Worker is in test/job-lifecycle-processes.test.ts.
import { type SQL, sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MAX_PROGRESS_BYTES, MAX_RESULT_BYTES, drain, type DrainOptions } from '../../src/drain/index.ts';
import { JobRegistry, JobValidationError, type JobDefinition, defineJob } from '../../src/jobs/registry.ts';
import { type EnqueueOptions, enqueue as enqueueTyped } from '../../src/jobs/enqueue.ts';
import {
  UnknownDependencyError,
  cancel,
  enqueue,
  enqueueMany,
  getDependencies,
  getJob,
  maintainHistory,
  pruneFinished,
  watchJob,
} from '../../src/queries/index.ts';
import { type Harness, jobRow, resetQueue } from '../support/harness.ts';
import { sleep } from '../support/time.ts';

/** Resolves when `signal` aborts (never rejects). */
const aborted = (signal: AbortSignal) =>
  new Promise<void>((resolve) =>
    signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
  );

export function jobLifecycleSuite(name: string, createHarness: () => Promise<Harness>, sizes: { fanIn: number }) {
  describe(`a job's whole life (${name})`, () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
      await h.query(
        'CREATE TABLE IF NOT EXISTS public.lifecycle_writes (job_id bigint NOT NULL, attempt int NOT NULL)',
      );
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h, ['public.lifecycle_writes']);
    });

    const run = (registry: JobRegistry, options: Partial<DrainOptions> = {}) =>
      drain(h.db, registry, {
        workerId: 'lifecycle',
        batchSize: 20,
        concurrency: 10,
        transactions: h.transactions,
        ...options,
      });
    // Live jobs and kept ones, wherever they are kept (pgdrain.jobs or the history).
    const row = (id: string) =>
      jobRow(h, id, 'status, result, progress, last_error, attempts, waiting_for, finished_at, keep_until');
    const count = async (where = 'true') =>
      Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs_and_history WHERE ${where}`))[0]!.n);
    const kind = <P>(definition: JobDefinition<P>) => defineJob(definition);
    /** Enqueues a job of the registry's kind `name`, validated and filled in by its definition. */
    const add = (registry: JobRegistry, name: string, payload: unknown, options?: EnqueueOptions) =>
      enqueueTyped(h.db, registry.get(name)!, payload, options);

    describe('results', () => {
      it('a kind with keepCompletedSeconds keeps its completed job with the result and finish time; a kind without deletes it', async () => {
        const registry = new JobRegistry([
          kind({
            kind: 'kept',
            schema: z.object({ n: z.number() }),
            keepCompletedSeconds: 600,
            handler: ({ n }) => ({ doubled: n * 2, note: 'é' }),
          }),
          kind({ kind: 'gone', schema: z.unknown(), handler: () => ({ ignored: true }) }),
        ]);
        const kept = await add(registry, 'kept', { n: 21 });
        const gone = await add(registry, 'gone', {});
        const report = await run(registry);
        expect(report).toMatchObject({ completed: 2, failed: 0, dead: 0, cancelled: 0 });
        const job = await getJob(h.db, kept.id);
        expect(job).toMatchObject({
          status: 'completed',
          result: { doubled: 42, note: 'é' },
          lockedBy: null,
          lockedAt: null,
        });
        expect(job!.finishedAt).toBeInstanceOf(Date);
        const keptFor = (job!.keepUntil!.getTime() - job!.finishedAt!.getTime()) / 1000;
        expect(keptFor).toBeCloseTo(600, 0);
        expect(await getJob(h.db, gone.id)).toBeNull();
      });

      it('a result over the cap, or one that is not JSON, fails the job for good, saying why', async () => {
        const registry = new JobRegistry([
          kind({
            kind: 'huge',
            schema: z.unknown(),
            keepCompletedSeconds: 60,
            handler: () => 'x'.repeat(MAX_RESULT_BYTES),
          }),
          kind({ kind: 'bigint', schema: z.unknown(), keepCompletedSeconds: 60, handler: () => ({ n: 1n }) }),
          kind({ kind: 'nothing', schema: z.unknown(), keepCompletedSeconds: 60, handler: () => undefined }),
        ]);
        const huge = await add(registry, 'huge', {});
        const bigint = await add(registry, 'bigint', {});
        const nothing = await add(registry, 'nothing', {});
        await run(registry);
        expect(await row(huge.id)).toMatchObject({
          status: 'dead',
          attempts: 1,
          last_error: expect.stringMatching(/result is \d+ bytes of JSON; a kept result is at most 65536/),
        });
        expect(await row(bigint.id)).toMatchObject({
          status: 'dead',
          attempts: 1,
          last_error: expect.stringContaining('is not JSON'),
        });
        expect(await row(nothing.id)).toMatchObject({ status: 'completed', result: null });
      });

      it('kept jobs are pruned once their time is up, and not before', async () => {
        const registry = new JobRegistry([
          kind({ kind: 'kept', schema: z.unknown(), keepCompletedSeconds: 60, handler: () => 1 }),
        ]);
        await enqueueMany(
          h.db,
          Array.from({ length: 30 }, () => ({ kind: 'kept', payload: {}, keepSeconds: 60 })),
        );
        await run(registry);
        expect(await count(`status = 'completed'`)).toBe(30);
        // Out of the hot table: in the history, in the partition of the day their keep ends.
        expect(Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n)).toBe(0);
        const partitions = await h.query<{ p: string }>(
          `SELECT DISTINCT tableoid::regclass::text AS p FROM pgdrain.job_history`,
        );
        expect(partitions.map((p) => p.p)).toEqual([expect.stringMatching(/^pgdrain\.job_history_p\d{8}$/)]);
        expect(await maintainHistory(h.db)).toMatchObject({ dropped: 0, pruned: 0 });
        expect(await count()).toBe(30);
        // A job whose keep is over is gone for every reader at once, whatever the partition holds.
        await h.query(
          `UPDATE pgdrain.job_history SET keep_until = now() - interval '1 second' WHERE id IN (SELECT id FROM pgdrain.job_history ORDER BY id LIMIT 12)`,
        );
        expect(await count()).toBe(18);
        // A day whose keeps are all over is dropped whole: here a past day's partition with 5 rows,
        // and 3 rows left in the default partition (no day partition was there for them).
        await h.query(
          `CREATE TABLE pgdrain.job_history_p20200101 PARTITION OF pgdrain.job_history FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00')`,
        );
        await h.query(
          `UPDATE pgdrain.job_history SET keep_until = '2020-01-01 12:00+00' WHERE id IN (SELECT id FROM pgdrain.job_history ORDER BY id DESC LIMIT 5)`,
        );
        await h.query(
          `UPDATE pgdrain.job_history SET keep_until = '2019-06-01 12:00+00' WHERE id IN (SELECT id FROM pgdrain.job_history WHERE keep_until > now() ORDER BY id DESC LIMIT 3)`,
        );
        expect((await h.query(`SELECT count(*)::int AS n FROM pgdrain.job_history_default`))[0]).toEqual({ n: 3 });
        expect(await maintainHistory(h.db)).toMatchObject({ dropped: 1, pruned: 3 });
        expect(await h.query(`SELECT to_regclass('pgdrain.job_history_p20200101') AS p`)).toEqual([{ p: null }]);
        expect(await count()).toBe(10);
        // Kept rows left in pgdrain.jobs (an older version kept them there) move over in batches.
        await h.query(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, finished_at, keep_until, result)
                       SELECT 'kept', '{}', 'completed', 1, now(), now() + interval '1 hour', to_jsonb(i) FROM generate_series(1, 7) i`);
        expect(await pruneFinished(h.db)).toMatchObject({ jobs: 0, moved: 7 });
        expect(Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n)).toBe(0);
        expect(await count(`status = 'completed'`)).toBe(17);
      });
    });

    describe('cancel', () => {
      it('a pending, delayed or waiting job is cancelled at once (kept, or deleted); a completed or dead one is refused; an unknown id is not found', async () => {
        const registry = new JobRegistry([
          kind({ kind: 'kept', schema: z.unknown(), keepCompletedSeconds: 60, handler: () => 'done' }),
          kind({
            kind: 'plain',
            schema: z.unknown(),
            maxAttempts: 1,
            handler: () => {
              throw new Error('no');
            },
          }),
        ]);
        const pending = await add(registry, 'kept', {});
        const delayed = await add(registry, 'plain', {}, { runAt: new Date(Date.now() + 3_600_000) });
        const parent = await add(registry, 'plain', {}, { runAt: new Date(Date.now() + 3_600_000) });
        const waiting = await add(registry, 'kept', {}, { after: [parent.id] });
        const grandchild = await add(registry, 'plain', {}, { after: [waiting.id] });
        expect(await cancel(h.db, pending.id)).toEqual({ outcome: 'cancelled' });
        expect(await row(pending.id)).toMatchObject({ status: 'cancelled', finished_at: expect.any(Date) });
        expect(await cancel(h.db, delayed.id)).toEqual({ outcome: 'cancelled' });
        expect(await row(delayed.id)).toBeUndefined(); // its kind keeps nothing
        expect(await cancel(h.db, waiting.id)).toEqual({ outcome: 'cancelled' });
        expect(await row(grandchild.id)).toMatchObject({
          status: 'dead',
          last_error: `job ${waiting.id} it waits for ended cancelled`,
        });
        expect(await cancel(h.db, pending.id)).toEqual({ outcome: 'cancelled' }); // again: as it is
        expect(await cancel(h.db, '987654321')).toEqual({ outcome: 'not_found' });
        expect(await cancel(h.db, 'nope')).toEqual({ outcome: 'not_found' });
        const done = await add(registry, 'kept', {});
        const dead = await add(registry, 'plain', {});
        await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [parent.id]);
        await run(registry);
        expect(await cancel(h.db, done.id)).toEqual({ outcome: 'not_cancellable', status: 'completed' });
        expect(await cancel(h.db, dead.id)).toEqual({ outcome: 'not_cancellable', status: 'dead' });
      });

      it("a running job: its handler's signal aborts within a third of the visibility timeout plus a second, and it ends cancelled, never retried", async () => {
        const aborts = new Map<string, number>();
        const registry = new JobRegistry([
          // One gives up when told; the other ignores its signal and returns anyway.
          kind({
            kind: 'obedient',
            schema: z.unknown(),
            keepCompletedSeconds: 60,
            maxAttempts: 5,
            handler: async (_, { job, signal }) => {
              await aborted(signal);
              aborts.set(job.id, Date.now());
              throw signal.reason;
            },
          }),
          kind({
            kind: 'stubborn',
            schema: z.unknown(),
            maxAttempts: 5,
            handler: async (_, { job, signal }) => {
              signal.addEventListener('abort', () => aborts.set(job.id, Date.now()));
              await sleep(4_000);
              return 'finished anyway';
            },
          }),
        ]);
        const obedient = await add(registry, 'obedient', {});
        const stubborn = await add(registry, 'stubborn', {});
        const draining = run(registry, { visibilityTimeoutSeconds: 3 });
        for (let i = 0; i < 100 && (await count(`status = 'running'`)) < 2; i++) await sleep(20);
        await sleep(200);
        const askedAt = Date.now();
        expect(await cancel(h.db, obedient.id)).toEqual({ outcome: 'cancelling' });
        expect(await cancel(h.db, stubborn.id)).toEqual({ outcome: 'cancelling' });
        expect(await cancel(h.db, stubborn.id)).toEqual({ outcome: 'cancelling' }); // asked twice: the same
        const report = await draining;
        expect(report).toMatchObject({ cancelled: 2, completed: 0, failed: 0, dead: 0 });
        for (const id of [obedient.id, stubborn.id]) expect(aborts.get(id)! - askedAt).toBeLessThan(1_000 + 1_000);
        expect(await row(obedient.id)).toMatchObject({ status: 'cancelled', attempts: 1, result: null });
        expect(await row(stubborn.id)).toBeUndefined(); // its kind keeps nothing
        expect(await run(registry)).toMatchObject({ claimed: 0 });
      });

      it('a job cancelled after its claim but before its handler started never runs', async () => {
        let ran = 0;
        const registry = new JobRegistry([
          kind({ kind: 'slow', schema: z.unknown(), handler: async () => sleep(2_500) }),
          kind({
            kind: 'queued',
            schema: z.unknown(),
            keepCompletedSeconds: 60,
            handler: () => {
              ran++;
            },
          }),
        ]);
        await add(registry, 'slow', {});
        const queued = await add(registry, 'queued', {});
        // One handler at a time: `queued` is claimed (prefetched) while `slow` runs.
        const draining = run(registry, { concurrency: 1, batchSize: 2, visibilityTimeoutSeconds: 3 });
        for (let i = 0; i < 100 && (await count(`status = 'running'`)) < 2; i++) await sleep(20);
        expect(await cancel(h.db, queued.id)).toEqual({ outcome: 'cancelling' });
        expect(await draining).toMatchObject({ completed: 1, cancelled: 1 });
        expect(ran).toBe(0);
        expect(await row(queued.id)).toMatchObject({ status: 'cancelled', attempts: 1 });
      });
    });

    it('progress is saved with a lease renewal, about once a second, read back while the job runs; too large a report throws', async () => {
      let tooLarge: unknown;
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const registry = new JobRegistry([
        kind({
          kind: 'reporting',
          schema: z.unknown(),
          handler: async (_, ctx) => {
            try {
              ctx.progress('x'.repeat(MAX_PROGRESS_BYTES));
            } catch (error) {
              tooLarge = error;
            }
            for (let step = 1; step <= 40; step++) {
              ctx.progress({ step, of: 40 });
              await sleep(25);
            }
            await held;
          },
        }),
      ]);
      const job = await add(registry, 'reporting', {});
      const updates: string[] = [];
      const dialect = new PgDialect();
      const counting = new Proxy(h.db, {
        get: (target, property, receiver) => {
          const value = Reflect.get(target, property, receiver);
          if (property !== 'execute') return typeof value === 'function' ? value.bind(target) : value;
          return (query: SQL) => {
            const text = dialect.sqlToQuery(query).sql;
            if (text.includes('progress = coalesce')) updates.push(text);
            return target.execute(query);
          };
        },
      });
      const draining = drain(counting, registry, { workerId: 'progress', visibilityTimeoutSeconds: 30 });
      let seen: unknown = null;
      for (let i = 0; i < 150 && (seen as { step?: number } | null)?.step !== 40; i++) {
        await sleep(20);
        seen = (await row(job.id))?.progress ?? null;
      }
      // 40 reports over a second: the last one arrives with the renewal a second after the first.
      expect(seen).toEqual({ step: 40, of: 40 });
      expect((await getJob(h.db, job.id))!.status).toBe('running');
      release();
      await draining;
      expect(updates.length).toBeGreaterThanOrEqual(1);
      expect(updates.length).toBeLessThanOrEqual(3);
      expect(tooLarge).toBeInstanceOf(RangeError);
      expect(String((tooLarge as Error).message)).toContain(`at most ${MAX_PROGRESS_BYTES} bytes`);
    });

    describe('dependencies', () => {
      it('a child waits for two parents, runs after both complete, and reads their kept results', async () => {
        const order: string[] = [];
        let readBack: unknown;
        const registry = new JobRegistry([
          kind({
            kind: 'parent',
            schema: z.object({ n: z.number() }),
            keepCompletedSeconds: 60,
            handler: ({ n }) => {
              order.push(`parent ${n}`);
              return { n };
            },
          }),
          kind({
            kind: 'child',
            schema: z.unknown(),
            handler: async (_, ctx) => {
              order.push('child');
              readBack = await ctx.dependencies();
            },
          }),
        ]);
        const a = await add(registry, 'parent', { n: 1 });
        const b = await add(registry, 'parent', { n: 2 }, { runAt: new Date(Date.now() + 3_600_000) });
        const child = await add(registry, 'child', {}, { after: [a.id, b.id, a.id] });
        expect(child.status).toBe('waiting');
        expect(await row(child.id)).toMatchObject({ status: 'waiting', waiting_for: 2 });
        await run(registry);
        expect(order).toEqual(['parent 1']);
        expect(await row(child.id)).toMatchObject({ status: 'waiting', waiting_for: 1 });
        await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [b.id]);
        const woken = await h.listen('pgdrain_jobs');
        await run(registry, { kinds: ['parent'] });
        // Released by the statement that completed its last parent: pending, nobody polled, and
        // its kind's drainers woken by that statement.
        expect(await row(child.id)).toMatchObject({ status: 'pending', waiting_for: 0 });
        for (let i = 0; i < 50 && !woken.received.includes('child'); i++) await sleep(20);
        await woken.close();
        expect(woken.received).toContain('child');
        await run(registry);
        expect(order).toEqual(['parent 1', 'parent 2', 'child']);
        expect(readBack).toEqual([
          { id: a.id, kind: 'parent', status: 'completed', result: { n: 1 } },
          { id: b.id, kind: 'parent', status: 'completed', result: { n: 2 } },
        ]);
      });

      it("a parent that ends dead makes its child, and the child's own dependents, dead, naming it", async () => {
        const registry = new JobRegistry([
          kind({
            kind: 'failing',
            schema: z.unknown(),
            maxAttempts: 1,
            handler: () => {
              throw new Error('broken');
            },
          }),
          kind({
            kind: 'after',
            schema: z.unknown(),
            handler: () => {
              throw new Error('must not run');
            },
          }),
        ]);
        const parent = await add(registry, 'failing', {});
        const other = await add(registry, 'after', {}, { runAt: new Date(Date.now() + 3_600_000) });
        const child = await add(registry, 'after', {}, { after: [parent.id, other.id] });
        const grandchild = await add(registry, 'after', {}, { after: [child.id] });
        await run(registry);
        const why = `job ${parent.id} it waits for ended dead`;
        expect(await row(child.id)).toMatchObject({
          status: 'dead',
          last_error: why,
          attempts: 0,
          waiting_for: null,
          finished_at: expect.any(Date),
        });
        expect(await row(grandchild.id)).toMatchObject({ status: 'dead', last_error: why });
        // Enqueued after its parent ended: dead at once.
        const late = await add(registry, 'after', {}, { after: [parent.id] });
        expect(late.status).toBe('dead');
      });

      it(`works with delete-on-success: ${sizes.fanIn.toLocaleString('en-US')} parents deleted as they complete release one child, counted down by their completions`, async () => {
        let childRan = 0;
        const registry = new JobRegistry([
          kind({ kind: 'leaf', schema: z.unknown(), handler: () => {} }),
          kind({
            kind: 'join',
            schema: z.unknown(),
            handler: () => {
              childRan++;
            },
          }),
        ]);
        const parents = await enqueueMany(
          h.db,
          Array.from({ length: sizes.fanIn }, (_, n) => ({ kind: 'leaf', payload: { n } })),
        );
        const child = await enqueue(h.db, { kind: 'join', payload: {}, after: parents.map((p) => p.id) });
        expect(await row(child.id)).toMatchObject({ status: 'waiting', waiting_for: sizes.fanIn });
        // Two drainers at once, claiming only parents: their completions count the child down.
        const other = await h.connect();
        await Promise.all([
          run(registry, { kinds: ['leaf'], batchSize: 250, concurrency: 250 }),
          drain(other, registry, { workerId: 'other', kinds: ['leaf'], batchSize: 250, concurrency: 250 }),
        ]);
        expect(await count(`kind = 'leaf'`)).toBe(0);
        expect(await row(child.id)).toMatchObject({ status: 'pending', waiting_for: 0 });
        await run(registry);
        expect(childRan).toBe(1);
        expect(await getDependencies(h.db, child.id)).toHaveLength(sizes.fanIn);
        expect((await getDependencies(h.db, child.id))[0]).toMatchObject({ kind: null, status: null, result: null });
      });

      it('a far drainer, whose completions ride its next claims, ends jobs with dependents, watchers and cancels the same way', async () => {
        let childRuns = 0;
        const registry = new JobRegistry([
          kind({ kind: 'parent', schema: z.object({ n: z.number() }), handler: () => sleep(20) }),
          kind({
            kind: 'child',
            schema: z.unknown(),
            handler: () => {
              childRuns++;
            },
          }),
        ]);
        const parents = await enqueueMany(
          h.db,
          Array.from({ length: 40 }, (_, n) => ({ kind: 'parent', payload: { n } })),
        );
        const child = await enqueue(h.db, { kind: 'child', payload: {}, after: parents.slice(0, 30).map((p) => p.id) });
        expect(await watchJob(h.db, parents[35]!.id, 30)).toBe(true);
        const report = await run(registry, { placement: 'far', batchSize: 5, concurrency: 5 });
        expect(report).toMatchObject({ completed: 41, lost: 0 });
        expect(childRuns).toBe(1);
        expect(await count()).toBe(0);
        expect(await h.query('SELECT id::text, status FROM pgdrain.finished_jobs')).toEqual([
          { id: parents[35]!.id, status: 'completed' },
        ]);
        expect(await row(child.id)).toBeUndefined();
      });

      it('an `after` naming a job that does not exist is refused and nothing is stored; `after` with a dedupe key is refused', async () => {
        const registry = new JobRegistry([kind({ kind: 'k', schema: z.unknown(), handler: () => {} })]);
        const real = await add(registry, 'k', {});
        await expect(add(registry, 'k', {}, { after: [real.id, '987654321'] })).rejects.toThrow(UnknownDependencyError);
        await expect(add(registry, 'k', {}, { after: [real.id, '987654321'] })).rejects.toThrow(
          /after names jobs that do not exist: 987654321/,
        );
        // Checked before anything is sent: it throws at once, as every invalid option does.
        expect(() => add(registry, 'k', {}, { after: [real.id], dedupeKey: 'x' })).toThrow(JobValidationError);
        expect(await count()).toBe(1);
        expect(await h.query('SELECT count(*)::int AS n FROM pgdrain.job_dependencies')).toEqual([{ n: 0 }]);
        expect(await row(real.id)).toMatchObject({ status: 'pending' });
      });
    });

    describe('transactional handlers', () => {
      const writes = async () =>
        h.query<{ job_id: string; attempt: number }>(
          'SELECT job_id::text, attempt FROM public.lifecycle_writes ORDER BY attempt',
        );
      const writingKind = (
        options: { failFirst?: boolean; afterWrite?: (signal: AbortSignal) => Promise<void> } = {},
      ) =>
        kind({
          kind: 'tx',
          schema: z.unknown(),
          transactional: true,
          keepCompletedSeconds: 60,
          timeoutMs: 1_000,
          handler: async (_, ctx) => {
            await ctx.tx.execute(
              sql`INSERT INTO public.lifecycle_writes (job_id, attempt) VALUES (${ctx.job.id}::bigint, ${ctx.job.attempts})`,
            );
            if (options.failFirst && ctx.job.attempts === 1) throw new Error('first attempt fails after writing');
            await options.afterWrite?.(ctx.signal);
            return { wrote: ctx.job.attempts };
          },
        });

      it('a handler that writes a row then throws leaves no row; its second attempt leaves exactly one, committed with the completion', async () => {
        const registry = new JobRegistry([writingKind({ failFirst: true })]);
        const job = await add(registry, 'tx', {});
        expect(await run(registry)).toMatchObject({ failed: 1, completed: 0 });
        expect(await writes()).toEqual([]);
        await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [job.id]);
        expect(await run(registry)).toMatchObject({ completed: 1 });
        expect(await writes()).toEqual([{ job_id: job.id, attempt: 2 }]);
        expect(await row(job.id)).toMatchObject({ status: 'completed', attempts: 2, result: { wrote: 2 } });
      });

      it('a handler given up mid-transaction (its timeout) writes nothing, even what it tries after', async () => {
        let lateWrite: unknown = 'not tried';
        const registry = new JobRegistry([
          kind({
            kind: 'tx',
            schema: z.unknown(),
            transactional: true,
            timeoutMs: 300,
            maxAttempts: 1,
            handler: async (_, ctx) => {
              await ctx.tx.execute(
                sql`INSERT INTO public.lifecycle_writes (job_id, attempt) VALUES (${ctx.job.id}::bigint, 1)`,
              );
              await sleep(600); // ignores its signal
              try {
                await ctx.tx.execute(
                  sql`INSERT INTO public.lifecycle_writes (job_id, attempt) VALUES (${ctx.job.id}::bigint, 2)`,
                );
                lateWrite = 'written';
              } catch (error) {
                lateWrite = error;
              }
            },
          }),
        ]);
        const job = await add(registry, 'tx', {});
        expect(await run(registry)).toMatchObject({ dead: 1 });
        // The handler tries its late write once its sleep is over (later under load).
        for (let waited = 0; lateWrite === 'not tried' && waited < 5_000; waited += 50) await sleep(50);
        expect(lateWrite).toBeInstanceOf(Error);
        expect(await writes()).toEqual([]);
        expect(await row(job.id)).toMatchObject({
          status: 'dead',
          last_error: 'TimeoutError: handler timed out after 300 ms',
        });
      });

      it('a running transactional job that is cancelled rolls back its writes and ends cancelled', async () => {
        const registry = new JobRegistry([writingKind({ afterWrite: (signal) => aborted(signal) })]);
        const job = await add(registry, 'tx', {});
        const draining = run(registry, { visibilityTimeoutSeconds: 2 });
        for (let i = 0; i < 100 && (await count(`status = 'running'`)) < 1; i++) await sleep(20);
        expect(await cancel(h.db, job.id)).toEqual({ outcome: 'cancelling' });
        expect(await draining).toMatchObject({ cancelled: 1, completed: 0 });
        expect(await writes()).toEqual([]);
        expect(await row(job.id)).toMatchObject({ status: 'cancelled', result: null });
      });

      it('ctx.tx throws for a kind that is not transactional', async () => {
        let thrown: unknown;
        const registry = new JobRegistry([
          kind({
            kind: 'plain',
            schema: z.unknown(),
            handler: (_, ctx) => {
              try {
                void ctx.tx;
              } catch (e) {
                thrown = e;
              }
            },
          }),
        ]);
        await add(registry, 'plain', {});
        await run(registry);
        expect(String(thrown)).toContain('kind plain is not transactional');
      });
    });

    it("an enqueue's timeoutMs overrides its kind's, within bounds", async () => {
      const registry = new JobRegistry([
        kind({ kind: 'sleepy', schema: z.unknown(), timeoutMs: 30_000, maxAttempts: 1, handler: () => sleep(1_000) }),
      ]);
      const quick = await add(registry, 'sleepy', {}, { timeoutMs: 200 });
      expect(await run(registry)).toMatchObject({ dead: 1 });
      expect(await row(quick.id)).toMatchObject({ last_error: 'TimeoutError: handler timed out after 200 ms' });
      expect(() => add(registry, 'sleepy', {}, { timeoutMs: 50 })).toThrow(
        /timeoutMs must be a whole number of milliseconds from 100 to 86400000/,
      );
      expect(() => add(registry, 'sleepy', {}, { timeoutMs: 86_400_001 })).toThrow(JobValidationError);
      await expect(h.query(`SELECT pgdrain.enqueue('sleepy', '{}', timeout_ms => 99)`)).rejects.toThrow(
        /timeout_ms is 99, use 100/,
      );
      expect(await count()).toBe(1);
    });

    it("a job may ask for a longer timeout than its kind's only up to maxTimeoutMs: refused at enqueue, cut to it when SQL asked for more", async () => {
      const registry = new JobRegistry([
        kind({ kind: 'capped', schema: z.unknown(), timeoutMs: 200, maxAttempts: 1, handler: () => sleep(1_500) }),
        kind({
          kind: 'roomy',
          schema: z.unknown(),
          timeoutMs: 200,
          maxTimeoutMs: 400,
          maxAttempts: 1,
          handler: () => sleep(1_500),
        }),
      ]);
      expect(() => add(registry, 'capped', {}, { timeoutMs: 201 })).toThrow(
        /timeoutMs: kind capped allows a job at most 200 ms \(its maxTimeoutMs\), not 201/,
      );
      expect(() => add(registry, 'roomy', {}, { timeoutMs: 401 })).toThrow(/at most 400 ms/);
      const asked = await add(registry, 'roomy', {}, { timeoutMs: 400 });
      // pgdrain.enqueue() knows nothing of kinds: what it stores is cut to the kind's bound when the job runs.
      const fromSql = (
        await h.query<{ id: string }>(
          `SELECT pgdrain.enqueue('capped', '{}', max_attempts => 1, timeout_ms => 86400000)::text AS id`,
        )
      )[0]!.id;
      expect(await run(registry)).toMatchObject({ dead: 2 });
      expect(await row(asked.id)).toMatchObject({ last_error: 'TimeoutError: handler timed out after 400 ms' });
      expect(await row(fromSql)).toMatchObject({ last_error: 'TimeoutError: handler timed out after 200 ms' });
      expect(() =>
        kind({ kind: 'odd', schema: z.unknown(), timeoutMs: 500, maxTimeoutMs: 400, handler: () => {} }),
      ).toThrow(/maxTimeoutMs \(400\) is below its timeoutMs \(500\)/);
    });

    it('a watched job that is completed and deleted is announced, and leaves a note of how it ended', async () => {
      const registry = new JobRegistry([kind({ kind: 'gone', schema: z.unknown(), handler: () => {} })]);
      const job = await add(registry, 'gone', {});
      const unwatched = await add(registry, 'gone', {});
      expect(await watchJob(h.db, job.id, 5)).toBe(true);
      const listener = await h.listen('pgdrain_finished');
      await run(registry);
      for (let i = 0; i < 50 && listener.received.length === 0; i++) await sleep(20);
      await listener.close();
      expect(listener.received).toEqual([job.id]); // not the job nobody watched
      expect(await row(unwatched.id)).toBeUndefined();
      expect(await row(job.id)).toBeUndefined();
      expect(await h.query('SELECT id::text, kind, status FROM pgdrain.finished_jobs')).toEqual([
        { id: job.id, kind: 'gone', status: 'completed' },
      ]);
      expect(await watchJob(h.db, job.id, 5)).toBe(false);
    });
  });
}
