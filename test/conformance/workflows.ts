// Durable workflows, written once and run on every driver (node-postgres in Node, neon-serverless
// and node-postgres through Hyperdrive inside workerd): steps that run once, sleeps and waits that
// park the run (no attempt spent, nothing held), events in the sender's transaction, children,
// cancel, bounds. A deploy that changes a workflow mid-run: workflow-changes.ts. Real processes
// killed mid-run are test/workflow-processes.test.ts.
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { drain, type DrainOptions } from '../../src/drain/index.ts';
import { enqueue } from '../../src/jobs/enqueue.ts';
import { JobRegistry, type JobDefinition, defineJob } from '../../src/jobs/registry.ts';
import { cancel, deadLetterOf, deleteJob, listSubscriptions, reap, retryFromStep } from '../../src/queries/index.ts';
import { subscribe, unsubscribe } from '../../src/jobs/subscriptions.ts';
import { PermanentJobError } from '../../src/jobs/registry.ts';
import { EventValidationError, defineWorkflow, sendEvent } from '../../src/workflows/index.ts';
import { type Harness, jobRow, resetQueue } from '../support/harness.ts';
import { sleep } from '../support/time.ts';

export function workflowSuite(name: string, createHarness: () => Promise<Harness>) {
  describe(`durable workflows (${name})`, () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
      await h.query(
        'CREATE TABLE IF NOT EXISTS public.workflow_effects (job_id bigint NOT NULL, step text NOT NULL, at timestamptz NOT NULL DEFAULT now())',
      );
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h, ['public.workflow_effects']);
    });

    const run = (registry: JobRegistry, options: Partial<DrainOptions> = {}) =>
      drain(h.db, registry, {
        workerId: 'workflows',
        batchSize: 20,
        concurrency: 10,
        transactions: h.transactions,
        ...options,
      });
    const job = async (id: string) =>
      (await jobRow(h, id, 'status, attempts, result, last_error, locked_by, waiting_for, run_at'))!;
    const steps = async (id: string) =>
      h.query<{
        name: string;
        status: string;
        attempts: number;
        result: unknown;
        error: string | null;
        wake_at: Date | null;
        event: string | null;
        child_id: string | null;
      }>(
        `SELECT name, status, attempts, result, error, wake_at, event, child_id::text FROM pgdrain.workflow_steps WHERE job_id = $1 ORDER BY position`,
        [id],
      );
    const effects = async (id: string) =>
      (
        await h.query<{ step: string }>(
          `SELECT step FROM public.workflow_effects WHERE job_id = $1 ORDER BY at, step`,
          [id],
        )
      ).map((r) => r.step);
    const effect = (db: typeof h.db, jobId: string, step: string) =>
      db.execute(sql`INSERT INTO public.workflow_effects (job_id, step) VALUES (${jobId}::bigint, ${step})`);

    it('runs each step once across attempts: a failed step runs again, stored ones return their result without running', async () => {
      const calls: Record<string, number> = {};
      let failNext = true;
      const flow = defineWorkflow({
        kind: 'wf_once',
        schema: z.object({ n: z.number() }),
        maxAttempts: 3,
        backoff: { baseSeconds: 0.4, capSeconds: 0.4 },
        keepCompletedSeconds: 3600,
        run: async ({ n }, step) => {
          const a = await step.run('a', () => {
            calls.a = (calls.a ?? 0) + 1;
            return { doubled: n * 2, at: new Date(0) };
          });
          const b = await step.run('b', ({ attempt }) => {
            calls.b = (calls.b ?? 0) + 1;
            if (failNext) {
              failNext = false;
              throw new Error(`b failed at attempt ${attempt}`);
            }
            return a.doubled + 1;
          });
          return { a, b };
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, { n: 5 });
      await run(registry);
      expect((await job(id)).status).toBe('pending'); // the attempt failed at b; retried after its backoff
      expect(await steps(id)).toMatchObject([
        { name: 'a', status: 'completed', attempts: 1, result: { doubled: 10, at: '1970-01-01T00:00:00.000Z' } },
        { name: 'b', status: 'failed', attempts: 1, error: 'b failed at attempt 1' },
      ]);
      await sleep(450);
      await run(registry);
      // The stored step returned its JSON (the Date as its string) without running again.
      expect(calls).toEqual({ a: 1, b: 2 });
      expect(await job(id)).toMatchObject({
        status: 'completed',
        attempts: 2,
        result: { a: { doubled: 10, at: '1970-01-01T00:00:00.000Z' }, b: 11 },
      });
      expect((await steps(id)).map((s) => [s.name, s.status, s.attempts])).toEqual([
        ['a', 'completed', 1],
        ['b', 'completed', 2],
      ]);
    });

    it('a step result with no exact JSON form (NaN, Infinity, a Map, a class instance) fails the step, naming it; a Date is kept as its string', async () => {
      class Point {
        x: number;
        constructor(x: number) {
          this.x = x;
        }
      }
      const bad: Record<string, () => unknown> = {
        nan: () => ({ n: NaN }),
        inf: () => [1, Infinity],
        map: () => new Map([['a', 1]]),
        point: () => ({ p: new Point(1) }),
      };
      for (const [name, value] of Object.entries(bad)) {
        const flow = defineWorkflow({
          kind: `wf_bad_${name}`,
          schema: z.object({}),
          maxAttempts: 1,
          run: async (_p, step) => step.run(name, value),
        });
        const { id } = await enqueue(h.db, flow, {});
        await run(new JobRegistry([flow]));
        const row = await job(id);
        expect(row.status, name).toBe('dead');
        expect(row.last_error, name).toContain(`step ${name}'s result is not JSON`);
        expect(await steps(id), name).toMatchObject([{ name, status: 'failed' }]);
      }
    });

    it("a transactional step's writes and its record commit together; a step name used twice is an error at the second call", async () => {
      const flow = defineWorkflow({
        kind: 'wf_tx',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step, ctx) => {
          await step.run(
            'write',
            async ({ tx }) => {
              await effect(tx, ctx.job.id, 'write');
            },
            { transactional: true },
          );
          await step.run('again', () => 1);
          await step.run('again', () => 2);
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      await run(new JobRegistry([flow]));
      expect(await effects(id)).toEqual(['write']);
      const dead = await job(id);
      expect(dead.status).toBe('dead');
      expect(dead.last_error).toMatch(/step name 'again' is used twice in one run/);
    });

    it('a transactional step that throws rolls its writes back and records nothing but its failure', async () => {
      const flow = defineWorkflow({
        kind: 'wf_tx_fail',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step, ctx) => {
          await step.run(
            'write',
            async ({ tx }) => {
              await effect(tx, ctx.job.id, 'write');
              throw new Error('after the write');
            },
            { transactional: true },
          );
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      await run(new JobRegistry([flow]));
      expect(await effects(id)).toEqual([]);
      expect(await steps(id)).toMatchObject([{ name: 'write', status: 'failed', error: 'after the write' }]);
    });

    it('sleep snoozes the run (pending until its end, no lock, no attempt spent) and it runs on after its time, once', async () => {
      let before = 0;
      let after = 0;
      const flow = defineWorkflow({
        kind: 'wf_sleep',
        schema: z.object({}),
        maxAttempts: 1,
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          await step.run('before', () => void before++);
          await step.sleep('nap', 0.5);
          await step.run('after', () => void after++);
          return 'woke';
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      const first = await run(registry);
      expect(first).toMatchObject({ snoozed: 1, completed: 0, failed: 0 });
      expect(first.nextDueAt).toBeGreaterThan(Date.now());
      const snoozed = await job(id);
      expect(snoozed).toMatchObject({ status: 'pending', attempts: 0, locked_by: null });
      const [, nap] = await steps(id);
      expect((await steps(id)).map((s) => s.status)).toEqual(['completed', 'sleeping']);
      // Its run_at is the sleep's end, and that is the moment the drain reported as due.
      expect((snoozed.run_at as Date).getTime()).toBe(nap!.wake_at!.getTime());
      expect(first.nextDueAt).toBe(nap!.wake_at!.getTime());
      // Not due yet: a drain claims nothing.
      expect(await run(registry)).toMatchObject({ claimed: 0 });
      await sleep(Math.max(0, first.nextDueAt! - Date.now()) + 20);
      const second = await run(registry);
      expect(second).toMatchObject({ completed: 1 });
      expect(await job(id)).toMatchObject({ status: 'completed', attempts: 1, result: 'woke' });
      expect({ before, after }).toEqual({ before: 1, after: 1 });
    });

    it('an open drain claims a snoozed run again at its time, not at the next poll', async () => {
      const flow = defineWorkflow({
        kind: 'wf_sleep_open',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          await step.sleep('nap', 0.3);
          return step.run('woke', () => Date.now());
        },
      });
      // A slow job keeps the drain open past the sleep's end.
      const slow = defineJob({ kind: 'wf_sleep_open_slow', schema: z.object({}), handler: () => sleep(1_500) });
      const registry = new JobRegistry([flow, slow]);
      const { id } = await enqueue(h.db, flow, {});
      await enqueue(h.db, slow, {});
      const started = Date.now();
      const report = await run(registry, { pollIntervalMs: 60_000 });
      expect(report).toMatchObject({ snoozed: 1, completed: 2 });
      const done = await job(id);
      expect(done.status).toBe('completed');
      // Woken at its time (0.3 s), long before the poll (60 s) and before the slow job ended.
      expect(done.result as number).toBeLessThan(started + 1_400);
    });

    it('a sleep whose drainer is gone needs no wake-up: any drain after its time claims it like a pending job', async () => {
      const flow = defineWorkflow({
        kind: 'wf_sleep_hk',
        schema: z.object({}),
        run: async (_p, step) => step.sleep('nap', 0.2),
      });
      const { id } = await enqueue(h.db, flow, {});
      await run(new JobRegistry([flow]));
      expect((await job(id)).status).toBe('pending');
      await sleep(300);
      expect(await run(new JobRegistry([flow]))).toMatchObject({ claimed: 1, completed: 1 });
      expect(await h.query(`SELECT 1 FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([]);
    });

    it('a park cannot be swallowed: code that catches around a sleep does not go on in the attempt', async () => {
      const reached: string[] = [];
      const flow = defineWorkflow({
        kind: 'wf_swallow',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          try {
            await step.sleep('nap', 0.2);
          } catch {
            reached.push('catch');
          }
          reached.push('after');
          return step.run('next', () => 'done');
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1, completed: 0, failed: 0, lost: 0 });
      expect(reached).toEqual([]);
      expect((await steps(id)).map((s) => [s.name, s.status])).toEqual([['nap', 'sleeping']]);
      await sleep(250);
      expect(await run(registry)).toMatchObject({ completed: 1 });
      expect(reached).toEqual(['after']);
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'done' });
    });

    it('Promise.all over sleeps parks on all of them at once: the run goes on after the longest, not their sum', async () => {
      let attempts = 0;
      const flow = defineWorkflow({
        kind: 'wf_parallel_sleeps',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          attempts++;
          await Promise.all([step.sleep('short', 0.3), step.sleep('long', 0.6)]);
          return 'both';
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1 });
      // Both recorded by the first attempt; the run is due at the first end.
      const [short, long] = await steps(id);
      expect([short!.status, long!.status]).toEqual(['sleeping', 'sleeping']);
      expect(((await job(id)).run_at as Date).getTime()).toBe(short!.wake_at!.getTime());
      // Once the longest has ended, one more attempt completes it: the sleeps ran side by side.
      await sleep(Math.max(0, long!.wake_at!.getTime() - Date.now()) + 30);
      expect(await run(registry)).toMatchObject({ completed: 1 });
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'both' });
      expect(attempts).toBe(2);
    });

    it('Promise.all over step.invoke enqueues every child in the first attempt; the run ends once they all have', async () => {
      const child = defineJob({
        kind: 'wf_fan_child',
        schema: z.object({ i: z.number() }),
        keepCompletedSeconds: 600,
        handler: async ({ i }) => {
          await sleep(100);
          return i * 2;
        },
      });
      let attempts = 0;
      const flow = defineWorkflow({
        kind: 'wf_fan_out',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          attempts++;
          const results = await Promise.all(
            Array.from({ length: 20 }, (_, i) => step.invoke<{ i: number }, number>(`child-${i}`, child, { i })),
          );
          return results.reduce((a, b) => a + b, 0);
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      // The run alone: its first attempt parks on all 20 children (one transaction enqueued them).
      expect(await run(new JobRegistry([flow]))).toMatchObject({ snoozed: 1 });
      const children = await h.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'wf_fan_child'`,
      );
      expect(children).toEqual([{ n: 20 }]);
      expect(await job(id)).toMatchObject({ status: 'waiting', waiting_for: 1 });
      expect((await steps(id)).map((s) => s.status)).toEqual(Array(20).fill('waiting'));
      // Then children and run together, until the run has completed.
      const registry = new JobRegistry([flow, child]);
      for (let round = 0; round < 10 && (await job(id)).status !== 'completed'; round++)
        await run(registry, { concurrency: 25, batchSize: 25 });
      expect(await job(id)).toMatchObject({ status: 'completed', result: 380 });
      // Each re-entry is woken by a child's end and parks on those left: far fewer than one per child.
      expect(attempts).toBeLessThanOrEqual(8);
    });

    it('Promise.race over parks goes on with the first one done; a sleep beside a wait ends the race at its time', async () => {
      const flow = defineWorkflow({
        kind: 'wf_race',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) =>
          Promise.race([
            step.sleep('deadline', 0.3).then(() => 'deadline'),
            step.waitForEvent('answer', { event: 'race.answer', key: 'k' }).then(() => 'answer'),
          ]),
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1 });
      // Parked on both: pending until the deadline (the wait alone has no time).
      expect((await steps(id)).map((s) => [s.name, s.status])).toEqual([
        ['deadline', 'sleeping'],
        ['answer', 'waiting'],
      ]);
      await sleep(350);
      expect(await run(registry)).toMatchObject({ completed: 1 });
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'deadline' });
    });

    it('a step that runs beside a park records its outcome before the attempt ends', async () => {
      let ran = 0;
      const flow = defineWorkflow({
        kind: 'wf_beside_park',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          // The nap outlasts the work even on a loaded machine: an attempt whose work took longer
          // would find the nap over and go on (no park), which is right, and not this test.
          const [, value] = await Promise.all([
            step.sleep('nap', 1),
            step.run('work', async () => {
              ran++;
              await sleep(100);
              return 'worked';
            }),
          ]);
          return value;
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1, lost: 0 });
      expect((await steps(id)).map((s) => [s.name, s.status])).toEqual([
        ['nap', 'sleeping'],
        ['work', 'completed'],
      ]);
      const [nap] = await steps(id);
      await sleep(Math.max(0, nap!.wake_at!.getTime() - Date.now()) + 30);
      expect(await run(registry)).toMatchObject({ completed: 1 });
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'worked' });
      expect(ran).toBe(1);
    });

    it("a step's own tries: a failed try snoozes the run for its backoff and runs the step again, no run attempt spent", async () => {
      let tries = 0;
      const flow = defineWorkflow({
        kind: 'wf_step_tries',
        schema: z.object({}),
        maxAttempts: 1,
        keepCompletedSeconds: 60,
        run: async (_p, step) =>
          step.run(
            'flaky',
            ({ attempt }) => {
              tries++;
              if (attempt < 3) throw new Error(`try ${attempt} failed`);
              return attempt;
            },
            // A backoff longer than a drain on a loaded machine: the first drain ends at the snooze.
            { maxAttempts: 3, backoff: { baseSeconds: 0.5 } },
          ),
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1, failed: 0 });
      const [first] = await steps(id);
      expect(first).toMatchObject({ status: 'failed', attempts: 1, error: 'try 1 failed' });
      expect(first!.wake_at).not.toBeNull();
      expect(await job(id)).toMatchObject({ status: 'pending', attempts: 0 });
      for (let round = 0; round < 60 && (await job(id)).status !== 'completed'; round++) {
        await sleep(120);
        await run(registry);
      }
      // The kind allows one attempt: the step's three tries did not spend it.
      expect(await job(id)).toMatchObject({ status: 'completed', result: 3, attempts: 1, last_error: null });
      expect((await steps(id))[0]).toMatchObject({ status: 'completed', attempts: 3, wake_at: null });
      expect(tries).toBe(3);
    });

    it("a step whose tries are spent gives its error to the run; a step's timeoutMs bounds each try", async () => {
      const flow = defineWorkflow({
        kind: 'wf_step_spent',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step) =>
          step.run(
            'slow',
            async ({ signal }) => {
              await sleep(400);
              return signal.aborted;
            },
            { maxAttempts: 2, timeoutMs: 50, backoff: { baseSeconds: 0.02 } },
          ),
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      for (let round = 0; round < 10 && (await job(id)).status !== 'dead'; round++) {
        await run(registry);
        await sleep(60);
      }
      expect(await job(id)).toMatchObject({
        status: 'dead',
        last_error: expect.stringMatching(/step slow timed out after 50 ms/),
      });
      expect((await steps(id))[0]).toMatchObject({ status: 'failed', attempts: 2 });
      const bad = defineWorkflow({
        kind: 'wf_step_bad_options',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step) => step.run('x', () => 1, { maxAttempts: 0 }),
      });
      const refused = await enqueue(h.db, bad, {});
      await run(new JobRegistry([bad]));
      expect((await job(refused.id)).last_error).toMatch(
        /step.run\('x'\): maxAttempts must be an integer from 1 to 100/,
      );
    });

    it("a step with a timeoutMs starts in an attempt with room for it: the kind's timeout counts only what runs between parks", async () => {
      const ran: string[] = [];
      const flow = defineWorkflow({
        kind: 'wf_step_room',
        schema: z.object({}),
        maxAttempts: 1,
        timeoutMs: 2_000,
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          await step.run('first', async () => {
            ran.push('first');
            await sleep(1_200);
          });
          // 0.8 s left in this attempt, 1.5 s asked: it runs at the start of the next one.
          return step.run(
            'second',
            async () => {
              ran.push('second');
              await sleep(1_000);
              return 'fit';
            },
            { timeoutMs: 1_500 },
          );
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      expect(await run(registry)).toMatchObject({ snoozed: 1, completed: 1, failed: 0, dead: 0 });
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'fit', last_error: null });
      expect(ran).toEqual(['first', 'second']);
    });

    it('a finished run again from a named step: that step and the later ones run again, the earlier ones are kept', async () => {
      const ran: string[] = [];
      let broken = true;
      const flow = defineWorkflow({
        kind: 'wf_restart',
        schema: z.object({}),
        maxAttempts: 1,
        keepCompletedSeconds: 600,
        run: async (_p, step) => {
          const a = await step.run('a', () => {
            ran.push('a');
            return 1;
          });
          const b = await step.run('b', () => {
            ran.push('b');
            if (broken) throw new PermanentJobError('b is broken');
            return 2;
          });
          const c = await step.run('c', () => {
            ran.push('c');
            return 3;
          });
          return a + b + c;
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      await run(registry);
      expect(await job(id)).toMatchObject({ status: 'dead' });
      // Not a step of it; and a run still live is refused.
      expect(await retryFromStep(h.db, id, 'z')).toEqual({ outcome: 'unknown_step', steps: ['a', 'b'] });
      broken = false; // the fix is deployed
      expect(await retryFromStep(h.db, id, 'b')).toMatchObject({
        outcome: 'retried',
        job: { status: 'pending', attempts: 0 },
      });
      expect(await retryFromStep(h.db, id, 'a')).toEqual({ outcome: 'live', status: 'pending' });
      await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: 6 });
      expect(ran).toEqual(['a', 'b', 'b', 'c']);
      // Completed and kept (in the history): from 'c' again, back from the history.
      expect(await retryFromStep(h.db, id, 'c')).toMatchObject({ outcome: 'retried' });
      expect(await h.query(`SELECT status FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([{ status: 'pending' }]);
      await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: 6 });
      expect(ran).toEqual(['a', 'b', 'b', 'c', 'c']);
      expect(await retryFromStep(h.db, '999999999', 'a')).toEqual({ outcome: 'not_found' });
    });

    it('a run restarted from a step that invoked a child forgets that child: a new one is enqueued, the old one ending changes nothing', async () => {
      const child = defineJob({
        kind: 'wf_restart_child',
        schema: z.object({}),
        keepCompletedSeconds: 600,
        handler: () => 'child',
      });
      const flow = defineWorkflow({
        kind: 'wf_restart_parent',
        schema: z.object({}),
        keepCompletedSeconds: 600,
        run: async (_p, step) => step.invoke('kid', child, {}),
      });
      const registry = new JobRegistry([flow, child]);
      const { id } = await enqueue(h.db, flow, {});
      for (let round = 0; round < 5 && (await job(id)).status !== 'completed'; round++) await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'child' });
      expect(await retryFromStep(h.db, id, 'kid')).toMatchObject({ outcome: 'retried' });
      expect(await h.query(`SELECT count(*)::int AS n FROM pgdrain.job_dependencies WHERE job_id = $1`, [id])).toEqual([
        { n: 0 },
      ]);
      for (let round = 0; round < 5 && (await job(id)).status !== 'completed'; round++) await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: 'child' });
      expect(
        await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs_and_history WHERE kind = 'wf_restart_child'`),
      ).toEqual([{ n: 2 }]);
    });

    it('progress reported before a park is saved with it: the waiting run shows how far it got', async () => {
      const flow = defineWorkflow({
        kind: 'wf_progress_park',
        schema: z.object({}),
        run: async (_p, step, ctx) => {
          await step.run('fetch', () => ctx.progress({ fetched: 10 }));
          ctx.progress({ fetched: 20, phase: 'waiting for approval' });
          await step.waitForEvent('approval', { event: 'wf.progress.approved', key: 'k' });
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      const { snoozed, completed, failed, dead, lost } = await run(new JobRegistry([flow]));
      expect({ snoozed, completed, failed, dead, lost }).toEqual({
        snoozed: 1,
        completed: 0,
        failed: 0,
        dead: 0,
        lost: 0,
      });
      expect(await h.query(`SELECT status, progress FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([
        { status: 'waiting', progress: { fetched: 20, phase: 'waiting for approval' } },
      ]);
    });

    it("events start work: every subscribed kind gets one job in the sender's transaction, a rollback none, with the event's payload and name", async () => {
      const seen: unknown[] = [];
      const receipt = defineJob({
        kind: 'ev_receipt',
        schema: z.object({ order: z.number() }),
        on: 'order.paid',
        maxAttempts: 7,
        handler: async (payload, ctx) => void seen.push({ kind: 'receipt', payload, event: await ctx.event() }),
      });
      const ledger = defineJob({
        kind: 'ev_ledger',
        schema: z.object({ order: z.number() }),
        on: ['order.paid', 'order.refunded'],
        handler: async (payload, ctx) => void seen.push({ kind: 'ledger', payload, event: await ctx.event() }),
      });
      const registry = new JobRegistry([receipt, ledger]);
      expect(await subscribe(h.db, registry)).toBe(3);
      expect((await listSubscriptions(h.db)).map((s) => [s.event, s.kind, s.maxAttempts])).toEqual(
        expect.arrayContaining([
          ['order.paid', 'ev_ledger', 3],
          ['order.paid', 'ev_receipt', 7],
          ['order.refunded', 'ev_ledger', 3],
        ]),
      );
      const rolledBack = new Error('rolled back');
      await expect(
        h.db.transaction(async (tx) => {
          await sendEvent(tx, { event: 'order.paid', key: 'order:1', payload: { order: 1 } });
          throw rolledBack;
        }),
      ).rejects.toBe(rolledBack);
      const started = async () =>
        h.query<{ kind: string; payload: unknown; max_attempts: number }>(
          `SELECT kind, payload, max_attempts FROM pgdrain.jobs WHERE kind LIKE 'ev\\_%' ORDER BY kind`,
        );
      expect(await started()).toEqual([]);
      const { id } = await h.db.transaction((tx) =>
        sendEvent(tx, { event: 'order.paid', key: 'order:2', payload: { order: 2 } }),
      );
      expect(await started()).toEqual([
        { kind: 'ev_ledger', payload: { order: 2 }, max_attempts: 3 },
        { kind: 'ev_receipt', payload: { order: 2 }, max_attempts: 7 },
      ]);
      expect(await run(registry)).toMatchObject({ completed: 2 });
      const event = { id, event: 'order.paid', key: 'order:2' };
      expect(seen).toEqual(
        expect.arrayContaining([
          { kind: 'receipt', payload: { order: 2 }, event },
          { kind: 'ledger', payload: { order: 2 }, event },
        ]),
      );
      // Sent in SQL with no drainer up: the subscriptions are rows, so it still fans out.
      await h.query(`SELECT pgdrain.send_event('order.refunded', 'order:2', '{"order": 2}')`);
      expect(await started()).toEqual([{ kind: 'ev_ledger', payload: { order: 2 }, max_attempts: 3 }]);
      // A retired kind's subscription goes only when asked; then its events start nothing.
      expect(await unsubscribe(h.db, 'ev_ledger', 'order.refunded')).toBe(true);
      expect(await unsubscribe(h.db, 'ev_ledger', 'order.refunded')).toBe(false);
      await run(registry);
      await h.query(`SELECT pgdrain.send_event('order.refunded', 'order:3', '{"order": 3}')`);
      expect(await started()).toEqual([]);
      // A job not started by an event says so.
      const plain = await enqueue(h.db, receipt, { order: 9 });
      expect(plain.id).toBeDefined();
      await run(registry);
      expect(seen.at(-1)).toEqual({ kind: 'receipt', payload: { order: 9 }, event: null });
      await h.query('DELETE FROM pgdrain.subscriptions');
    });

    it("an event sent again with its sender's id, while the first is kept, is dropped: one job per subscriber, one answer, the first's id", async () => {
      const kind = defineJob({ kind: 'ev_once_id', schema: z.unknown(), on: 'hook.delivered', handler: () => {} });
      await subscribe(h.db, new JobRegistry([kind]));
      const first = await sendEvent(h.db, { event: 'hook.delivered', key: 'k', payload: { n: 1 }, id: 'delivery-7' });
      // The sender redelivers (TypeScript, SQL, a concurrent pair): nothing more is sent.
      const again = await sendEvent(h.db, { event: 'hook.delivered', key: 'k', payload: { n: 2 }, id: 'delivery-7' });
      const [inSql] = await h.query<{ id: string }>(
        `SELECT pgdrain.send_event('hook.delivered', 'k', '{"n": 3}', id => 'delivery-7')::text AS id`,
      );
      const both = await Promise.all([
        sendEvent(h.db, { event: 'hook.delivered', key: 'k', id: 'delivery-8' }),
        sendEvent(h.db, { event: 'hook.delivered', key: 'k', id: 'delivery-8' }),
      ]);
      expect(again.id).toBe(first.id);
      expect(inSql!.id).toBe(first.id);
      expect(both[0].id).toBe(both[1].id);
      // Another event name with the same id, and no id at all: events of their own.
      const other = await sendEvent(h.db, { event: 'hook.other', key: 'k', id: 'delivery-7' });
      const plain = await sendEvent(h.db, { event: 'hook.delivered', key: 'k' });
      expect(new Set([first.id, both[0].id, other.id, plain.id]).size).toBe(4);
      expect(await h.query(`SELECT payload FROM pgdrain.jobs WHERE kind = 'ev_once_id' ORDER BY id`)).toEqual([
        { payload: { n: 1 } },
        { payload: {} },
        { payload: {} },
      ]);
      await expect(sendEvent(h.db, { event: 'hook.delivered', key: 'k', id: '' })).rejects.toBeInstanceOf(
        EventValidationError,
      );
      await h.query(`DELETE FROM pgdrain.jobs WHERE kind = 'ev_once_id'`);
      await h.query('DELETE FROM pgdrain.subscriptions');
    });

    it('a fan-out is exactly once per event and subscriber: the same event fanned out again adds nothing', async () => {
      const kind = defineJob({ kind: 'ev_once', schema: z.unknown(), on: 'thing.happened', handler: () => {} });
      await subscribe(h.db, new JobRegistry([kind]));
      const { id } = await sendEvent(h.db, { event: 'thing.happened', key: 'k' });
      // The fan-out's own statement, run again for the same event (a retried delivery of it).
      await h.query(
        `INSERT INTO pgdrain.jobs (kind, payload, dedupe_key) SELECT s.kind, '{}', 'pgdrain.event:' || $1 || ':' || s.kind
           FROM pgdrain.subscriptions s WHERE s.event = 'thing.happened'
         ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING`,
        [id],
      );
      expect(await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'ev_once'`)).toEqual([{ n: 1 }]);
      await h.query(`DELETE FROM pgdrain.jobs WHERE kind = 'ev_once'`);
      await h.query('DELETE FROM pgdrain.subscriptions');
    });

    it('dead letters: a job that dies any way enqueues, in the same statement, one job of its deadLetter kind describing it', async () => {
      const letters: { job: { id: string; kind: string; payload: unknown; attempts: number; lastError: string } }[] =
        [];
      const sink = defineJob({
        kind: 'dl_sink',
        schema: z.any(),
        maxAttempts: 5,
        handler: (payload) => void letters.push(payload),
      });
      const spent = defineJob({
        kind: 'dl_spent',
        schema: z.object({ n: z.number() }),
        maxAttempts: 2,
        backoff: { baseSeconds: 0.01, capSeconds: 0.01 },
        deadLetter: 'dl_sink',
        handler: () => {
          throw new Error('always fails');
        },
      });
      const permanent = defineJob({
        kind: 'dl_permanent',
        schema: z.object({}),
        deadLetter: 'dl_sink',
        handler: () => {
          throw new PermanentJobError('cannot ever work');
        },
      });
      const flow = defineWorkflow({
        kind: 'dl_flow',
        schema: z.object({}),
        maxAttempts: 1,
        deadLetter: 'dl_sink',
        run: async (_p, step) =>
          step.run('boom', () => {
            throw new Error('the run dies');
          }),
      });
      // A job that dies because one it waits for (`after`) died, and one waiting for it in turn.
      const follower = defineJob({
        kind: 'dl_follower',
        schema: z.object({ step: z.number() }),
        deadLetter: 'dl_sink',
        handler: () => {},
      });
      const registry = new JobRegistry([sink, spent, permanent, flow, follower]);
      await subscribe(h.db, registry);
      const a = await enqueue(h.db, spent, { n: 1 });
      const b = await enqueue(h.db, permanent, {});
      const c = await enqueue(h.db, flow, {});
      const e = await enqueue(h.db, follower, { step: 1 }, { after: [b.id] });
      const f = await enqueue(h.db, follower, { step: 2 }, { after: [e.id] });
      // Jobs waiting for one that is cancelled, or deleted, before it ran: pgdrain.cancel() and the
      // delete end it as every ending statement does, letters included.
      const cancelledParent = await enqueue(h.db, follower, { step: 10 }, { runAt: new Date(Date.now() + 3_600_000) });
      const g = await enqueue(h.db, follower, { step: 3 }, { after: [cancelledParent.id] });
      const deletedParent = await enqueue(h.db, follower, { step: 11 }, { runAt: new Date(Date.now() + 3_600_000) });
      const i = await enqueue(h.db, follower, { step: 4 }, { after: [deletedParent.id] });
      expect(await cancel(h.db, cancelledParent.id)).toEqual({ outcome: 'cancelled' });
      expect(await deleteJob(h.db, deletedParent.id)).toEqual({ outcome: 'deleted' });
      // A lease that ran out on the last attempt it may lose with its drainer: the reaper makes it dead.
      const [d] = await h.query<{ id: string }>(
        `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, locked_at, locked_by, locked_until,
                                   lost_attempts)
         VALUES ('dl_spent', '{"n": 4}', 'running', 2, 2, now() - interval '1 minute', 'gone:1', now() - interval '1 second',
                 4) RETURNING id::text`,
      );
      expect((await reap(h.db)).dead).toEqual([d!.id]);
      for (let round = 0; round < 10 && letters.length < 8; round++) {
        await run(registry);
        await sleep(30);
      }
      const byKind = Object.fromEntries(letters.map((l) => [l.job.id, l.job]));
      expect(byKind[a.id]).toMatchObject({
        kind: 'dl_spent',
        payload: { n: 1 },
        attempts: 2,
        lastError: 'always fails',
      });
      expect(byKind[b.id]).toMatchObject({
        kind: 'dl_permanent',
        attempts: 1,
        lastError: expect.stringMatching(/cannot ever work/),
      });
      expect(byKind[c.id]).toMatchObject({ kind: 'dl_flow', lastError: expect.stringMatching(/the run dies/) });
      expect(byKind[d!.id]).toMatchObject({
        kind: 'dl_spent',
        payload: { n: 4 },
        lastError: expect.stringMatching(/visibility timeout/),
      });
      expect(byKind[e.id]).toMatchObject({
        kind: 'dl_follower',
        payload: { step: 1 },
        attempts: 0,
        lastError: `job ${b.id} it waits for ended dead`,
      });
      expect(byKind[f.id]).toMatchObject({
        kind: 'dl_follower',
        payload: { step: 2 },
        lastError: `job ${b.id} it waits for ended dead`,
      });
      expect(byKind[g.id]).toMatchObject({
        kind: 'dl_follower',
        payload: { step: 3 },
        lastError: `job ${cancelledParent.id} it waits for ended cancelled`,
      });
      expect(byKind[i.id]).toMatchObject({
        kind: 'dl_follower',
        payload: { step: 4 },
        lastError: `job ${deletedParent.id} it waits for ended deleted`,
      });
      expect(letters).toHaveLength(8);
      expect(await deadLetterOf(h.db, f.id)).not.toBeNull();
      // The dead job names its letter, which took its kind's options.
      const letterId = await deadLetterOf(h.db, a.id);
      expect(letterId).not.toBeNull();
      expect(await h.query(`SELECT kind, status FROM pgdrain.jobs_and_history WHERE id = $1`, [letterId])).toEqual([]);
      expect(await deadLetterOf(h.db, a.id)).toBe(letterId);
      await h.query('DELETE FROM pgdrain.dead_letter_routes');
    });

    it('a dead-letter circle is refused when the kinds are registered; a kind into itself at definition', () => {
      const one = defineJob({ kind: 'dl_one', schema: z.any(), deadLetter: 'dl_two', handler: () => {} });
      const two = defineJob({ kind: 'dl_two', schema: z.any(), deadLetter: 'dl_one', handler: () => {} });
      expect(() => new JobRegistry([one, two])).toThrow(
        /dl_one: its dead letters go round in a circle: dl_one → dl_two → dl_one/,
      );
      expect(() => defineJob({ kind: 'dl_self', schema: z.any(), deadLetter: 'dl_self', handler: () => {} })).toThrow(
        /cannot be its own deadLetter/,
      );
    });

    it("an event a subscriber's schema refuses is refused at send, naming the subscriber and the field; nothing is stored", async () => {
      defineJob({
        kind: 'ev_strict',
        schema: z.object({ orderId: z.number().int() }),
        on: 'ev.strict',
        handler: () => {},
      });
      const events = async () =>
        (await h.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgdrain.events WHERE event = 'ev.strict'`))[0]!.n;
      const before = await events();
      const refused = await sendEvent(h.db, { event: 'ev.strict', key: 'k', payload: { orderId: 'seven' } }).catch(
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(EventValidationError);
      expect(refused).toMatchObject({ field: 'payload', subscriber: 'ev_strict', code: 'invalid_event' });
      expect((refused as Error).message).toMatch(/payload refused by subscriber ev_strict: .*orderId/);
      expect(await events()).toBe(before);
      // One it accepts is sent.
      await sendEvent(h.db, { event: 'ev.strict', key: 'k', payload: { orderId: 7 } });
      expect(await events()).toBe(before + 1);
    });

    it("cancelOn: an event with the run's key cancels it and its children; one sent before it started cancels it at its start", async () => {
      const child = defineJob({ kind: 'co_child', schema: z.object({}), keepCompletedSeconds: 60, handler: () => {} });
      const flow = defineWorkflow({
        kind: 'co_flow',
        schema: z.object({ orderId: z.number() }),
        keepCompletedSeconds: 60,
        cancelOn: [{ event: 'co.refunded', key: (p) => `order:${p.orderId}` }],
        run: async (_p, step) => step.invoke('ship', child, {}),
      });
      // The child's kind is not drained here: the run waits on it.
      const registry = new JobRegistry([flow]);
      const a = await enqueue(h.db, flow, { orderId: 1 });
      expect(await run(registry)).toMatchObject({ snoozed: 1 });
      const [kid] = await h.query<{ id: string }>(
        `SELECT child_id::text AS id FROM pgdrain.workflow_steps WHERE job_id = $1`,
        [a.id],
      );
      await sendEvent(h.db, { event: 'co.refunded', key: 'order:2' }); // another order's
      expect((await job(a.id)).status).toBe('waiting');
      await h.db.transaction((tx) => sendEvent(tx, { event: 'co.refunded', key: 'order:1' }));
      expect((await job(a.id)).status).toBe('cancelled');
      expect((await job(kid!.id)).status).toBe('cancelled');
      // Sent after the enqueue, before the run started: the run is cancelled when it starts.
      const b = await enqueue(h.db, flow, { orderId: 3 });
      await sendEvent(h.db, { event: 'co.refunded', key: 'order:3' });
      expect(await run(registry)).toMatchObject({ cancelled: 1 });
      expect((await job(b.id)).status).toBe('cancelled');
      expect(() =>
        defineWorkflow({
          kind: 'co_bad',
          schema: z.any(),
          cancelOn: [{ event: 'no spaces', key: () => 'k' }],
          run: async () => 1,
        }),
      ).toThrow(/cancelOn takes \{ event, key/);
    });

    it('a kind whose on is not an event name is refused at definition', () => {
      expect(() => defineJob({ kind: 'ev_bad', schema: z.unknown(), on: 'no spaces', handler: () => {} })).toThrow(
        /ev_bad: on: "no spaces": an event's name is/,
      );
    });

    it("an event answers every run waiting on its event and key, in the sender's transaction; a rolled-back send wakes nothing", async () => {
      const flow = defineWorkflow({
        kind: 'wf_event',
        schema: z.object({ user: z.number() }),
        keepCompletedSeconds: 60,
        run: async ({ user }, step) =>
          step.waitForEvent<{ at: string }>('verified', {
            event: 'email.verified',
            key: `user:${user}`,
            timeoutSeconds: 3600,
          }),
      });
      const registry = new JobRegistry([flow]);
      const a = await enqueue(h.db, flow, { user: 1 });
      const b = await enqueue(h.db, flow, { user: 1 });
      const other = await enqueue(h.db, flow, { user: 2 });
      expect(await run(registry)).toMatchObject({ snoozed: 3 });
      const rolledBack = new Error('rolled back');
      await expect(
        h.db.transaction(async (tx) => {
          await sendEvent(tx, { event: 'email.verified', key: 'user:1', payload: { at: 'never' } });
          throw rolledBack;
        }),
      ).rejects.toBe(rolledBack);
      // Waiting with a timeout: pending until it (an hour), as a sleep is.
      const dueIn = async (id: string) => ((await job(id)).run_at as Date).getTime() - Date.now();
      expect(await job(a.id)).toMatchObject({ status: 'pending', locked_by: null });
      expect(await dueIn(a.id)).toBeGreaterThan(3_000_000);
      await h.db.transaction(async (tx) => {
        await sendEvent(tx, { event: 'email.verified', key: 'user:1', payload: { at: 'now' } });
      });
      // Made due now; the other key's run stays until its timeout.
      expect(await dueIn(a.id)).toBeLessThanOrEqual(0);
      expect(await dueIn(b.id)).toBeLessThanOrEqual(0);
      expect(await dueIn(other.id)).toBeGreaterThan(3_000_000);
      await run(registry);
      expect((await job(a.id)).result).toEqual({ at: 'now' });
      expect((await job(b.id)).result).toEqual({ at: 'now' });
      expect(await job(other.id)).toMatchObject({ status: 'pending', result: null });
    });

    it('an event sent after the run was enqueued but before it reached its wait is found; one sent before the run is not; two waits take two events', async () => {
      await sendEvent(h.db, { event: 'approved', key: 'order:7', payload: { n: 0 } }); // before the run: not its event
      await sleep(5);
      const flow = defineWorkflow({
        kind: 'wf_early_event',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          const first = await step.waitForEvent('first', { event: 'approved', key: 'order:7' });
          const second = await step.waitForEvent('second', { event: 'approved', key: 'order:7', timeoutSeconds: 0 });
          return { first, second };
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      await sleep(5);
      await sendEvent(h.db, { event: 'approved', key: 'order:7', payload: { n: 1 } });
      await run(new JobRegistry([flow]));
      // The first wait took the event sent after the enqueue; the second found no other one and timed out at once.
      expect(await job(id)).toMatchObject({ status: 'completed', result: { first: { n: 1 }, second: null } });
    });

    // Every JSON shape a step, an event or a child gives comes back as it went in when the run is
    // re-entered (issue 42: a JSON string was parsed twice on replay — 'hello' killed the run, '42'
    // came back a number, '{"x":1}' an object, and every Date result, stored as its ISO string, died).
    it("every JSON shape comes back as it went in on replay: step results, event payloads, a child's result", async () => {
      const shapes: Record<string, unknown> = {
        word: 'hello',
        numeric: '42',
        objectText: '{"x":1}',
        quoted: '"q"',
        empty: '',
        unicode: 'zoë ✓',
        nullText: 'null',
        number: 42,
        float: 1.5,
        negative: -7,
        zero: 0,
        yes: true,
        no: false,
        nothing: null,
        list: [1, 'two', null, { three: 3 }],
        object: { a: { b: ['c'] } },
      };
      const child = defineJob({
        kind: 'wf_shape_child',
        schema: z.object({}),
        keepCompletedSeconds: 600,
        handler: () => 'a child says hello',
      });
      const flow = defineWorkflow({
        kind: 'wf_shapes',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => {
          const got: Record<string, unknown> = {};
          for (const [name, value] of Object.entries(shapes)) got[name] = await step.run(name, () => value);
          const date = await step.run('date', () => new Date(Date.UTC(2026, 11, 2)));
          await step.sleep('between', 0.05); // re-entered from here: every stored result is read back
          const event = await step.waitForEvent('word-event', { event: 'shaped', key: 'k' });
          const fromChild = await step.invoke('child', child, {});
          return {
            got,
            date,
            event,
            fromChild,
            types: Object.fromEntries(
              Object.entries(got).map(([k, v]) => [k, v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v]),
            ),
          };
        },
      });
      const registry = new JobRegistry([flow, child]);
      const { id } = await enqueue(h.db, flow, {});
      await sendEvent(h.db, { event: 'shaped', key: 'k', payload: 'an event says hello' });
      for (let round = 0; round < 10 && (await job(id)).status !== 'completed'; round++) {
        await sleep(60);
        await run(registry);
      }
      const done = await job(id);
      expect(done.last_error).toBeNull();
      expect(done).toMatchObject({ status: 'completed' });
      expect(done.result).toEqual({
        got: shapes,
        date: '2026-12-02T00:00:00.000Z',
        event: 'an event says hello',
        fromChild: 'a child says hello',
        types: Object.fromEntries(
          Object.entries(shapes).map(([k, v]) => [k, v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v]),
        ),
      });
      // Read back by a later replay too (the stored rows, as loadSteps reads them).
      expect((await steps(id)).find((s) => s.name === 'word')).toMatchObject({ status: 'completed', result: 'hello' });
    });

    it('sleepUntil parks the run until its moment, kept across re-entries; a moment past completes at once; a bad one is an error', async () => {
      const at = new Date(Date.now() + 400);
      const flow = defineWorkflow({
        kind: 'wf_sleep_until',
        schema: z.object({ at: z.string() }),
        keepCompletedSeconds: 60,
        run: async (p, step) => {
          await step.sleepUntil('past', new Date(Date.now() - 60_000));
          await step.sleepUntil('until', new Date(p.at));
          return { wokeAt: await step.run('woke', () => Date.now()) };
        },
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, { at: at.toISOString() });
      const first = await run(registry);
      expect(first.nextDueAt).toBe(at.getTime());
      expect(await job(id)).toMatchObject({ status: 'pending', run_at: at });
      expect((await steps(id)).map((s) => [s.name, s.status, s.wake_at?.getTime() ?? null])).toEqual([
        ['past', 'completed', null],
        ['until', 'sleeping', at.getTime()],
      ]);
      await sleep(Math.max(0, at.getTime() - Date.now()) + 50);
      await run(registry);
      const done = await job(id);
      expect(done.status).toBe('completed');
      expect((done.result as { wokeAt: number }).wokeAt).toBeGreaterThanOrEqual(at.getTime());
      const bad = defineWorkflow({
        kind: 'wf_sleep_until_bad',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step) => step.sleepUntil('never', new Date(Date.now() + 400 * 86_400_000)),
      });
      const refused = await enqueue(h.db, bad, {});
      await run(new JobRegistry([bad]));
      expect((await job(refused.id)).last_error).toMatch(/sleepUntil\('never'\): until is more than a year ahead/);
    });

    it('a wait with match is answered only by an event whose payload contains it: others neither answer nor wake it', async () => {
      const flow = defineWorkflow({
        kind: 'wf_match',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => ({
          paid: await step.waitForEvent('paid', {
            event: 'order.updated',
            key: 'order:9',
            match: { status: 'paid', lines: [{ sku: 'a' }] },
          }),
        }),
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      // Sent before the run reached its wait: one that does not match is passed over.
      await sendEvent(h.db, {
        event: 'order.updated',
        key: 'order:9',
        payload: { status: 'open', lines: [{ sku: 'a' }] },
      });
      await run(registry);
      expect((await job(id)).status).toBe('waiting');
      expect((await steps(id))[0]).toMatchObject({ status: 'waiting', event: 'order.updated' });
      // Sent while it waits: a payload without the match leaves it waiting (and not pending).
      await sendEvent(h.db, {
        event: 'order.updated',
        key: 'order:9',
        payload: { status: 'paid', lines: [{ sku: 'b' }] },
      });
      expect((await job(id)).status).toBe('waiting');
      const matching = { status: 'paid', total: 12, lines: [{ sku: 'b' }, { sku: 'a', qty: 2 }] };
      await sendEvent(h.db, { event: 'order.updated', key: 'order:9', payload: matching });
      expect((await job(id)).status).toBe('pending');
      await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: { paid: matching } });
      // A match that is not an object is an error naming the step, before anything is written.
      const bad = defineWorkflow({
        kind: 'wf_match_bad',
        schema: z.object({}),
        maxAttempts: 1,
        run: async (_p, step) =>
          step.waitForEvent('w', { event: 'e', key: 'k', match: ['paid'] as unknown as Record<string, unknown> }),
      });
      const refused = await enqueue(h.db, bad, {});
      await run(new JobRegistry([bad]));
      expect((await job(refused.id)).last_error).toMatch(/waitForEvent\('w'\): match must be an object/);
    });

    it('a wait times out with null at its time', async () => {
      const flow = defineWorkflow({
        kind: 'wf_timeout',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        run: async (_p, step) => ({
          got: await step.waitForEvent('wait', { event: 'never', key: 'k', timeoutSeconds: 0.3 }),
        }),
      });
      const registry = new JobRegistry([flow]);
      const { id } = await enqueue(h.db, flow, {});
      const first = await run(registry);
      expect(first.nextDueAt).not.toBeNull();
      expect((await job(id)).status).toBe('pending');
      await sleep(400);
      await run(registry);
      expect(await job(id)).toMatchObject({ status: 'completed', result: { got: null } });
    });

    it('invoke enqueues the child once, parks until it ends, and returns its result; a child that dies fails the step', async () => {
      let childRuns = 0;
      const child = defineJob({
        kind: 'wf_child',
        schema: z.object({ x: z.number() }),
        keepCompletedSeconds: 600,
        maxAttempts: 1,
        handler: ({ x }) => {
          childRuns++;
          if (x < 0) throw new Error('negative');
          return { squared: x * x };
        },
      });
      const parent = defineWorkflow({
        kind: 'wf_parent',
        schema: z.object({ x: z.number() }),
        maxAttempts: 1,
        keepCompletedSeconds: 60,
        run: async ({ x }, step) => step.invoke('square', child, { x }),
      });
      const registry = new JobRegistry([child, parent]);
      const ok = await enqueue(h.db, parent, { x: 7 });
      const bad = await enqueue(h.db, parent, { x: -1 });
      await run(registry);
      // The children completed or died in the same drain, which woke and ran the parents.
      expect(await job(ok.id)).toMatchObject({ status: 'completed', result: { squared: 49 } });
      const failed = await job(bad.id);
      expect(failed.status).toBe('dead');
      expect(failed.last_error).toMatch(/job \d+ it invoked ended dead: negative/);
      expect(childRuns).toBe(2);
      expect(
        Number((await h.query(`SELECT count(*) AS n FROM pgdrain.jobs_and_history WHERE kind = 'wf_child'`))[0]!.n),
      ).toBe(2);
    });

    it('cancelling a waiting workflow ends its wait and cancels its pending child; bounds are errors naming the field', async () => {
      const child = defineJob({
        kind: 'wf_slow_child',
        schema: z.object({}),
        keepCompletedSeconds: 60,
        handler: () => 1,
      });
      const parent = defineWorkflow({
        kind: 'wf_cancel',
        schema: z.object({}),
        run: async (_p, step) => step.invoke('child', child, {}),
      });
      const { id } = await enqueue(h.db, parent, {});
      await run(new JobRegistry([parent])); // drains the parent only: the child stays pending
      const [s] = await steps(id);
      expect(s).toMatchObject({ status: 'waiting' });
      expect(await cancel(h.db, id)).toEqual({ outcome: 'cancelled' });
      expect((await job(s!.child_id!)).status).toBe('cancelled');
      expect(await h.query(`SELECT 1 FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([]);

      await expect(sendEvent(h.db, { event: 'bad name!', key: 'k' })).rejects.toMatchObject({ field: 'event' });
      await expect(sendEvent(h.db, { event: 'e', key: '' })).rejects.toMatchObject({ field: 'key' });
      await expect(sendEvent(h.db, { event: 'e', key: 'k', payload: 'x'.repeat(70_000) })).rejects.toBeInstanceOf(
        EventValidationError,
      );
      await expect(h.query(`SELECT pgdrain.send_event('e', 'k', to_jsonb(repeat('x', 70000)))`)).rejects.toThrow(
        /at most 65536/,
      );
      expect(Number((await h.query(`SELECT count(*) AS n FROM pgdrain.events`))[0]!.n)).toBe(0);
    });

    it('a run reaches at most 1,000 steps: one more fails it at once, its attempts unspent', async () => {
      const flow = defineWorkflow({
        kind: 'wf_many',
        schema: z.object({}),
        maxAttempts: 3,
        timeoutMs: 120_000,
        run: async (_p, step) => {
          for (let i = 0; i <= 1000; i++) await step.run(`s${i}`, () => i);
        },
      });
      const { id } = await enqueue(h.db, flow, {});
      await run(new JobRegistry([flow]));
      expect(await job(id)).toMatchObject({ status: 'dead', attempts: 1 });
      expect((await job(id)).last_error).toMatch(/at most 1000 steps; step 's1000' is one more/);
      expect(
        Number((await h.query(`SELECT count(*) AS n FROM pgdrain.workflow_steps WHERE job_id = $1`, [id]))[0]!.n),
      ).toBe(1000);
    }, 120_000);
  });
}

export type { JobDefinition };
