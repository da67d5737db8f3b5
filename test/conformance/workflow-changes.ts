// A deploy that changes a workflow while its runs are in flight, written once and run on every
// driver (node-postgres in Node, neon-serverless and node-postgres through Hyperdrive in workerd).
// Each case is a change a user makes between two deploys: the old code runs a run part way, the new
// code meets its history. A change that departs from the history holds the run — nothing of the new
// code runs, no completed step's effect repeats, no child is enqueued — with a reason that names the
// step; versions let old runs finish on old code beside new runs on new code; step.patched() takes
// the old path for runs already past it. Real processes swapping their jobs module:
// test/workflow-processes.test.ts.
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { drain, type DrainOptions } from '../../src/drain/index.ts';
import { enqueue } from '../../src/jobs/enqueue.ts';
import { JobRegistry, defineJob } from '../../src/jobs/registry.ts';
import { jobJson } from '../../src/http/job-json.ts';
import { countTotals, getJob, releaseHeldRuns, retryFromStep } from '../../src/queries/index.ts';
import { registerKinds } from '../../src/runtime/core.ts';
import { checkWorkflows } from '../../src/workflows/check.ts';
import { defineWorkflow, sendEvent, type WorkflowStep } from '../../src/workflows/index.ts';
import { type Harness, jobRow, resetQueue } from '../support/harness.ts';
import { sleep } from '../support/time.ts';

type Run = (payload: { key: string }, step: WorkflowStep) => Promise<unknown>;

export function workflowChangeSuite(name: string, createHarness: () => Promise<Harness>) {
  describe(`workflows changed by a deploy (${name})`, () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
      await h.query(
        'CREATE TABLE IF NOT EXISTS public.deploy_effects (job_id bigint NOT NULL, step text NOT NULL, at timestamptz NOT NULL DEFAULT now())',
      );
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h, ['public.deploy_effects']);
    });

    const drainWith = (registry: JobRegistry, options: Partial<DrainOptions> = {}) =>
      drain(h.db, registry, {
        workerId: 'deploys',
        batchSize: 20,
        concurrency: 10,
        transactions: h.transactions,
        ...options,
      });
    const effects = async (id: string) =>
      (
        await h.query<{ step: string }>(`SELECT step FROM public.deploy_effects WHERE job_id = $1 ORDER BY at, step`, [
          id,
        ])
      ).map((r) => r.step);
    const job = async (id: string) =>
      (await jobRow<{ status: string; attempts: number; held: Record<string, unknown> | null; last_error: string }>(
        h,
        id,
        'status, attempts, held, last_error, version',
      ))!;
    const flow = (run: Run, extra: { version?: number; kind?: string } = {}) =>
      defineWorkflow<{ key: string }>({
        kind: extra.kind ?? 'deployed',
        schema: z.object({ key: z.string() }),
        maxAttempts: 3,
        keepCompletedSeconds: 3600,
        ...(extra.version ? { version: extra.version } : {}),
        run: (payload, step) => run(payload, step),
      });
    /** The old code runs a run until it parks; returns its id. */
    const startOn = async (old: ReturnType<typeof flow>, key = 'k1') => {
      const { id } = await enqueue(h.db, old, { key });
      await drainWith(new JobRegistry([old]));
      return id;
    };

    it('renaming a completed transactional step holds the run: the charge happens once, and the reason names the step', async () => {
      const v1 = flow(async ({ key }, step) => {
        await step.run(
          'charge',
          async ({ tx }) => {
            await tx.execute(sql`INSERT INTO public.deploy_effects (job_id, step)
              SELECT id, 'charge' FROM pgdrain.jobs WHERE kind = 'deployed'`);
          },
          { transactional: true },
        );
        await step.waitForEvent('shipped', { event: 'deploy.shipped', key });
        return 'done';
      });
      const v2 = flow(async ({ key }, step) => {
        await step.run(
          'charge-card',
          async ({ tx }) => {
            await tx.execute(sql`INSERT INTO public.deploy_effects (job_id, step)
              SELECT id, 'charge-card' FROM pgdrain.jobs WHERE kind = 'deployed'`);
          },
          { transactional: true },
        );
        await step.waitForEvent('shipped', { event: 'deploy.shipped', key });
        return 'done';
      });
      const id = await startOn(v1);
      expect(await effects(id)).toEqual(['charge']);
      await sendEvent(h.db, { event: 'deploy.shipped', key: 'k1', payload: {} });
      const report = await drainWith(new JobRegistry([v2]));
      expect(report).toMatchObject({ claimed: 1, snoozed: 1, failed: 0, dead: 0 });
      expect(await effects(id)).toEqual(['charge']);
      const held = await job(id);
      // Nothing ran, and the attempt was refunded.
      expect(held).toMatchObject({ status: 'waiting', attempts: 0 });
      expect(held.held).toMatchObject({
        code: 'workflow_changed',
        step: 'charge-card',
        recorded: null,
        called: 'run',
        version: 1,
      });
      expect(held.last_error).toMatch(
        /the code calls step\.run\(\) 'charge-card', which the run's history does not have/,
      );
      expect(held.last_error).toMatch(/'charge' \(step\.run\(\), position 0\)/);
      // GET /jobs/:id (and `pgdrain job`) say so.
      expect(jobJson((await getJob(h.db, id))!)).toMatchObject({
        status: 'waiting',
        version: 1,
        held: { code: 'workflow_changed', step: 'charge-card' },
        lastError: held.last_error,
      });
      // Held: no drainer claims it, however often it drains.
      expect((await drainWith(new JobRegistry([v2]))).claimed).toBe(0);
      expect((await countTotals(h.db)).deployed).toMatchObject({ diverged: 1 });
      // A deploy that fits its history (the old code) lets it replay, and it ends as it would have.
      expect(await releaseHeldRuns(h.db, ['deployed'])).toEqual({ deployed: 1 });
      expect(await drainWith(new JobRegistry([v1]))).toMatchObject({ completed: 1 });
      expect(await effects(id)).toEqual(['charge']);
      expect(await job(id)).toMatchObject({ status: 'completed', held: null });
    });

    it('a step inserted before a completed one holds the run; nothing of the new code runs', async () => {
      const ran: string[] = [];
      const v1 = flow(async (_p, step) => {
        await step.run('a', () => void ran.push('a'));
        await step.sleep('pause', 0.05);
        await step.run('b', () => void ran.push('b'));
      });
      const v2 = flow(async (_p, step) => {
        await step.run('audit', () => void ran.push('audit'));
        await step.run('a', () => void ran.push('a@v2'));
        await step.sleep('pause', 0.05);
        await step.run('b', () => void ran.push('b@v2'));
      });
      const id = await startOn(v1);
      await sleep(80);
      expect(await drainWith(new JobRegistry([v2]))).toMatchObject({ snoozed: 1 });
      expect(ran).toEqual(['a']);
      expect((await job(id)).held).toMatchObject({ step: 'audit', called: 'run', position: 2 });
    });

    it('a step of the same name as another type (a sleep, now a run) holds the run; its function never runs', async () => {
      let called = 0;
      const v1 = flow(async (_p, step) => {
        await step.sleep('prep', 60);
      });
      const v2 = flow(async (_p, step) => {
        await step.run('prep', () => {
          called++;
          return 1;
        });
      });
      const id = await startOn(v1);
      await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [id]);
      expect(await drainWith(new JobRegistry([v2]))).toMatchObject({ snoozed: 1 });
      expect(called).toBe(0);
      expect((await job(id)).held).toMatchObject({ step: 'prep', recorded: 'sleep', called: 'run', position: 0 });
      expect((await job(id)).last_error).toMatch(
        /is recorded as step\.sleep\(\), and the code now calls it as step\.run\(\)/,
      );
    });

    it('a completed run step now invoked as a child holds the run; no child is enqueued', async () => {
      const child = defineJob({
        kind: 'deployed_child',
        schema: z.unknown(),
        keepCompletedSeconds: 60,
        handler: () => 1,
      });
      const v1 = flow(async (_p, step) => {
        await step.run('lookup', () => ({ city: 'Lyon' }));
        await step.sleep('later', 60);
      });
      const v2 = flow(async (_p, step) => {
        await step.invoke('lookup', child, {});
        await step.sleep('later', 60);
      });
      const id = await startOn(v1);
      await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [id]);
      expect(await drainWith(new JobRegistry([v2, child]))).toMatchObject({ snoozed: 1 });
      expect(await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'deployed_child'`)).toEqual([
        { n: 0 },
      ]);
      expect((await job(id)).held).toMatchObject({ step: 'lookup', recorded: 'run', called: 'invoke' });
    });

    it('a parked wait renamed, or waiting for another event, holds the run when it wakes', async () => {
      const v1 = flow(async ({ key }, step) => step.waitForEvent('paid', { event: 'deploy.paid', key }));
      const renamed = flow(async ({ key }, step) => step.waitForEvent('payment', { event: 'deploy.paid', key }));
      const otherEvent = flow(async ({ key }, step) => step.waitForEvent('paid', { event: 'payment.done', key }));
      const a = await startOn(v1, 'a');
      const b = await startOn(v1, 'b');
      for (const key of ['a', 'b']) await sendEvent(h.db, { event: 'deploy.paid', key, payload: { key } });
      await drainWith(new JobRegistry([renamed]), { ids: [a] });
      await drainWith(new JobRegistry([otherEvent]), { ids: [b] });
      expect((await job(a)).held).toMatchObject({ step: 'payment', recorded: null, called: 'waitForEvent' });
      expect((await job(b)).held).toMatchObject({ step: 'paid', recorded: 'waitForEvent', called: 'waitForEvent' });
      expect((await job(b)).last_error).toMatch(
        /recorded a wait for event 'deploy\.paid' with key 'b', and the code now waits for event 'payment\.done'/,
      );
    });

    it('versions side by side: an old run finishes on the old code, a new run starts on the new, and a drainer without a version claims none of its runs', async () => {
      const ran: string[] = [];
      // Parked on an event, not a short sleep: a drain slowed by load once ran a 50 ms sleep's
      // wake-up itself, and the old run was done before the drainers of one version were tried.
      const v1 = flow(
        async ({ key }, step) => {
          await step.run('one', () => void ran.push('one@v1'));
          await step.waitForEvent('go', { event: 'deploy.go', key });
          await step.run('two', () => void ran.push('two@v1'));
          return 'v1';
        },
        { version: 1 },
      );
      const v2 = flow(
        async (_p, step) => {
          await step.run('uno', () => void ran.push('uno@v2'));
          return 'v2';
        },
        { version: 2 },
      );
      const old = await startOn(v1);
      // The new deploy has both: new runs start on the highest.
      const { id: fresh } = await enqueue(h.db, new JobRegistry([v1, v2]).get('deployed')!, { key: 'k2' });
      expect(await job(fresh)).toMatchObject({ version: 2 });
      expect(await job(old)).toMatchObject({ version: null });
      await sendEvent(h.db, { event: 'deploy.go', key: 'k1', payload: {} });
      // A drainer that has only version 1 leaves the version-2 run alone, and the other way round.
      expect(await drainWith(new JobRegistry([v2]), { ids: [old] })).toMatchObject({ claimed: 0 });
      expect(await drainWith(new JobRegistry([v1]), { ids: [fresh] })).toMatchObject({ claimed: 0 });
      expect(await drainWith(new JobRegistry([v1, v2]))).toMatchObject({ completed: 2 });
      expect(ran.sort()).toEqual(['one@v1', 'two@v1', 'uno@v2']);
      expect(await jobRow(h, old, 'result')).toEqual({ result: 'v1' });
      expect(await jobRow(h, fresh, 'result')).toEqual({ result: 'v2' });
    });

    it('step.patched(): false for a run whose history went past it, true for one that reaches it fresh; recorded, so every replay agrees', async () => {
      const ran: string[] = [];
      const v1 = flow(async ({ key }, step) => {
        await step.run('a', () => void ran.push(`a:${key}`));
        await step.sleep('pause', 0.05);
        await step.run('b', () => void ran.push(`b:${key}`));
      });
      const v2 = flow(async ({ key }, step) => {
        await step.run('a', () => void ran.push(`a:${key}`));
        if (await step.patched('check-stock')) await step.run('check', () => void ran.push(`check:${key}`));
        await step.sleep('pause', 0.05);
        await step.run('b', () => void ran.push(`b:${key}`));
      });
      const old = await startOn(v1, 'old');
      const { id: fresh } = await enqueue(h.db, v2, { key: 'new' });
      for (let round = 0; round < 5 && ran.length < 5; round++) {
        await drainWith(new JobRegistry([v2]));
        await sleep(80);
      }
      expect(ran.sort()).toEqual(['a:new', 'a:old', 'b:new', 'b:old', 'check:new']);
      const answers = await h.query<{ job_id: string; result: boolean }>(
        `SELECT job_id::text AS job_id, result FROM pgdrain.workflow_steps WHERE name = 'patched:check-stock'
          ORDER BY workflow_steps.job_id`,
      );
      expect(answers).toEqual([
        { job_id: old, result: false },
        { job_id: fresh, result: true },
      ]);
    });

    it('checkWorkflows replays the runs in flight and runs nothing: fits, diverges (its step), fails (its payload), unclaimable (its version)', async () => {
      const ran: string[] = [];
      const v1 = flow(async ({ key }, step) => {
        await step.run('reserve', () => void ran.push(`reserve:${key}`));
        await step.waitForEvent('paid', { event: 'deploy.check', key });
        await step.run('ship', () => void ran.push(`ship:${key}`));
      });
      // Ids across a power of ten (…99, …100), past any id used before: pages ordered by the ids'
      // text once skipped runs.
      await h.query(
        `SELECT setval(s, power(10, ceil(log(10, coalesce(pg_sequence_last_value(s::regclass), 1) + 3::numeric)))::bigint - 2)
           FROM pg_get_serial_sequence('pgdrain.jobs', 'id') AS s`,
      );
      const a = await startOn(v1, 'a');
      const b = await startOn(v1, 'b');
      expect([b.length, BigInt(b) - BigInt(a), /^9+$/.test(a)]).toEqual([a.length + 1, 1n, true]);
      expect(ran.sort()).toEqual(['reserve:a', 'reserve:b']);
      const before = await h.query('SELECT * FROM pgdrain.workflow_steps ORDER BY job_id, position');

      // The same code, and a change that only appends: both fit.
      expect(await checkWorkflows(h.db, [v1])).toMatchObject({
        checked: 2,
        diverges: [],
        fails: [],
        kinds: { deployed: { checked: 2, diverges: 0, fails: 0 } },
      });
      // A renamed completed step: each run would be held there.
      const renamed = flow(async ({ key }, step) => {
        await step.run('reserve-stock', () => void ran.push(`reserve-stock:${key}`));
        await step.waitForEvent('paid', { event: 'deploy.check', key });
      });
      const held = await checkWorkflows(h.db, [renamed], { pageSize: 1 });
      expect(held.diverges.map((d) => [d.id, d.step])).toEqual([
        [a, 'reserve-stock'],
        [b, 'reserve-stock'],
      ]);
      expect(held.diverges[0]!.why).toMatch(/which the run's history does not have/);
      // A schema the payloads no longer fit: the runs would fail.
      const stricter = defineWorkflow<{ key: number }>({
        kind: 'deployed',
        schema: z.object({ key: z.number() }),
        run: async () => {},
      });
      expect((await checkWorkflows(h.db, [stricter])).fails).toHaveLength(2);
      // Only a version 2: the runs of version 1 would wait for a drainer that has it.
      expect(await checkWorkflows(h.db, [flow(async () => {}, { version: 2 })])).toMatchObject({
        checked: 0,
        unclaimable: [{ kind: 'deployed', version: 1, runs: 2 }],
      });
      // Nothing ran, nothing was written.
      expect(ran.sort()).toEqual(['reserve:a', 'reserve:b']);
      expect(await h.query('SELECT * FROM pgdrain.workflow_steps ORDER BY job_id, position')).toEqual(before);
    });

    it('a step result that is not JSON fails the run at once, naming where in the result it is', async () => {
      let calls = 0;
      const bad = flow(async (_p, step) =>
        step.run('quote', () => {
          calls++;
          return { lines: [{ cents: 100 }, { cents: 250n }] };
        }),
      );
      const { id } = await enqueue(h.db, bad, { key: 'k' });
      expect(await drainWith(new JobRegistry([bad]))).toMatchObject({ dead: 1 });
      expect(calls).toBe(1);
      expect(await job(id)).toMatchObject({ status: 'dead', attempts: 1 });
      expect((await job(id)).last_error).toMatch(/step quote's result is not JSON: a BigInt at \.lines\[1\]\.cents/);
    });

    it('a drainer that starts with a kind lets its held runs replay: a fixed deploy finishes them, one still changed holds them again', async () => {
      // A pause of a second: a drain slowed by load ran a 50 ms sleep's wake-up itself, and the
      // run was over before the changed code met it.
      const v1 = flow(async (_p, step) => {
        await step.run('a', () => 1);
        await step.sleep('pause', 1);
        return 'ok';
      });
      const broken = flow(async (_p, step) => {
        await step.run('renamed', () => 1);
        await step.sleep('pause', 1);
        return 'ok';
      });
      const id = await startOn(v1);
      expect(await job(id)).toMatchObject({ status: 'pending' });
      await sleep(1_100);
      await drainWith(new JobRegistry([broken]));
      expect(await job(id)).toMatchObject({ status: 'waiting', held: { step: 'renamed' } });
      // Another start of the broken code: replayed once, held again, nothing ran.
      expect((await registerKinds(h.db, new JobRegistry([broken]), 'test')).released).toEqual({ deployed: 1 });
      await drainWith(new JobRegistry([broken]));
      expect(await job(id)).toMatchObject({ status: 'waiting', held: { step: 'renamed' }, attempts: 0 });
      // A person restarts it from a step instead: the held run goes on from there.
      expect(await retryFromStep(h.db, id, 'a')).toMatchObject({ outcome: 'retried' });
      expect(await drainWith(new JobRegistry([broken]))).toMatchObject({ snoozed: 1, completed: 0 });
      await sleep(1_100);
      expect(await drainWith(new JobRegistry([broken]))).toMatchObject({ completed: 1 });
    });

    it("a deploy that changes a workflow's code replays its parked runs once: a departing change holds them now, a fitting one parks them again", async () => {
      await resetQueue(h, ['pgdrain.kinds']);
      const options = { kind: 'deployed', schema: z.object({ key: z.string() }), keepCompletedSeconds: 3600 };
      // Three deploys' code, each its own run function (what the kind's code hash is taken of).
      const v1 = defineWorkflow<{ key: string }>({
        ...options,
        run: async ({ key }, step) => {
          await step.run('reserve', () => 'reserved');
          await step.waitForEvent('paid', { event: 'deploy.paid', key, timeoutSeconds: 3600 });
          return 'v1';
        },
      });
      const fitting = defineWorkflow<{ key: string }>({
        ...options,
        run: async ({ key }, step) => {
          await step.run('reserve', () => 'reserved');
          await step.waitForEvent('paid', { event: 'deploy.paid', key, timeoutSeconds: 3600 });
          return 'fitting';
        },
      });
      const departing = defineWorkflow<{ key: string }>({
        ...options,
        run: async ({ key }, step) => {
          await step.run('reserve-stock', () => 'reserved');
          await step.waitForEvent('paid', { event: 'deploy.paid', key, timeoutSeconds: 3600 });
          return 'departing';
        },
      });
      await registerKinds(h.db, new JobRegistry([v1]), 'deploy-1');
      const id = await startOn(v1);
      // A timed wait parks the run pending until its timeout.
      const parkedUntil = async () =>
        (
          await h.query<{ status: string; held: unknown; attempts: number; waits: number }>(
            `SELECT status, held, attempts, extract(epoch from run_at - now())::float8 AS waits FROM pgdrain.jobs WHERE id = $1`,
            [id],
          )
        )[0]!;
      expect(await parkedUntil()).toMatchObject({ status: 'pending', held: null, waits: expect.any(Number) });
      expect((await parkedUntil()).waits).toBeGreaterThan(3500);
      const timeout = await h.query<{ wake_at: string }>(
        `SELECT wake_at::text FROM pgdrain.workflow_steps WHERE job_id = $1 AND name = 'paid'`,
        [id],
      );

      // Deploy 2 fits the history: replayed once, parked again where it was, its timeout kept.
      const second = await registerKinds(h.db, new JobRegistry([fitting]), 'deploy-2');
      expect(second.replayed).toEqual({ deployed: 1 });
      expect(second.replaced).toEqual([expect.objectContaining({ differences: ['the code of version 1'] })]);
      expect(await drainWith(new JobRegistry([fitting]))).toMatchObject({ claimed: 1, failed: 0, dead: 0 });
      expect(await parkedUntil()).toMatchObject({ status: 'pending', held: null, attempts: 0 });
      expect((await parkedUntil()).waits).toBeGreaterThan(3500);
      expect(
        await h.query(`SELECT wake_at::text FROM pgdrain.workflow_steps WHERE job_id = $1 AND name = 'paid'`, [id]),
      ).toEqual(timeout);
      // The same code again (another replica of deploy 2): nothing replays.
      expect((await registerKinds(h.db, new JobRegistry([fitting]), 'deploy-2b')).replayed).toEqual({});

      // Deploy 3 departs from it: held now, before its event comes, with nothing of it run.
      expect((await registerKinds(h.db, new JobRegistry([departing]), 'deploy-3')).replayed).toEqual({ deployed: 1 });
      await drainWith(new JobRegistry([departing]));
      expect(await job(id)).toMatchObject({ status: 'waiting', held: { step: 'reserve-stock' }, attempts: 0 });
      expect((await countTotals(h.db)).deployed).toMatchObject({ diverged: 1 });
    });
  });
}
