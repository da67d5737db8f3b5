// The Worker's cron drainer and run-now inside workerd against a real PostgreSQL, on both of the
// Worker's paths: Neon's driver (DATABASE_URL) and node-postgres through Hyperdrive (HYPERDRIVE).
import { createExecutionContext, createScheduledController, env, waitOnExecutionContext } from 'cloudflare:test';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { Webhook } from 'standardwebhooks';
import { drain } from '../../src/drain/index.ts';
import { JobRegistry, createWebhookJob, defineJob, parseSigningSecrets } from '../../src/jobs/index.ts';
import { claim, enqueueMany } from '../../src/queries/index.ts';
import { createWorker, type Env } from '../../src/worker/create-worker.ts';
import { defineSchedule } from '../../src/schedules.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { createHyperdriveHarness } from './hyperdrive-harness.ts';
import { createNeonHarness } from './neon-harness.ts';

const runs = new Map<number, number>();
const countJob = defineJob({
  kind: 'count',
  schema: z.object({ n: z.number() }),
  handler: ({ n }) => void runs.set(n, (runs.get(n) ?? 0) + 1),
});
const sleepJob = defineJob({
  kind: 'sleep',
  schema: z.object({ ms: z.number() }),
  handler: ({ ms }) => new Promise<void>((r) => setTimeout(r, ms)),
});
const hangJob = defineJob({ kind: 'hang', schema: z.unknown(), handler: () => new Promise<void>(() => {}) });
const failJob = defineJob({
  kind: 'fails',
  schema: z.unknown(),
  handler: () => {
    throw new Error('run-now failure');
  },
});
const eagerJob = defineJob({
  kind: 'eager',
  schema: z.object({ n: z.number() }),
  eager: true,
  handler: ({ n }) => void runs.set(n, (runs.get(n) ?? 0) + 1),
});

// A job's whole life through the Worker itself: a transactional kind on the Worker's own
// connections, a kept result read by a waiting request, a cancel that reaches a cron's handler.
const txJob = defineJob({
  kind: 'tx',
  schema: z.unknown(),
  transactional: true,
  keepCompletedSeconds: 60,
  handler: async (_, ctx) => {
    await ctx.tx.execute(
      sql`INSERT INTO public.lifecycle_writes (job_id, attempt) VALUES (${ctx.job.id}::bigint, ${ctx.job.attempts})`,
    );
    if (ctx.job.attempts === 1) throw new Error('first attempt fails after writing');
    return { attempt: ctx.job.attempts };
  },
});
const keptJob = defineJob({
  kind: 'kept',
  schema: z.object({ ms: z.number() }),
  keepCompletedSeconds: 60,
  handler: async ({ ms }) => {
    await new Promise((r) => setTimeout(r, ms));
    return { slept: ms };
  },
});
const abortedAt = new Map<string, number>();
const cancellableJob = defineJob({
  kind: 'cancellable',
  schema: z.unknown(),
  handler: (_, { job, signal }) =>
    new Promise<void>((_resolve, reject) => {
      signal.addEventListener('abort', () => {
        abortedAt.set(job.id, Date.now());
        reject(signal.reason);
      });
    }),
});

const worker = createWorker({ jobs: [countJob, sleepJob, hangJob, failJob, eagerJob, txJob, keptJob, cancellableJob] });
const cron = () => createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() });

const PATHS = [
  {
    name: 'Neon',
    database: { DATABASE_URL: env.SCHEDULED_DATABASE_URL },
    harness: () => createNeonHarness(env.SCHEDULED_DATABASE_URL),
  },
  {
    name: 'Hyperdrive',
    database: { HYPERDRIVE: env.HYPERDRIVE_SCHEDULED, DATABASE_URL: undefined },
    harness: () => createHyperdriveHarness(env.HYPERDRIVE_SCHEDULED),
  },
] as const;

for (const path of PATHS) {
  const testEnv = (vars: Partial<Env> = {}): Env => ({ ...(env as unknown as Env), ...path.database, ...vars });

  let h: Harness;
  const count = async (where = 'true') =>
    Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE ${where}`))[0]!.n);

  describe(`scheduled() in workerd, ${path.name} path`, () => {
    beforeAll(async () => {
      h = await path.harness();
      await h.query(
        'CREATE TABLE IF NOT EXISTS public.lifecycle_writes (job_id bigint NOT NULL, attempt int NOT NULL)',
      );
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h, ['pgdrain.schedules', 'public.lifecycle_writes']);
      runs.clear();
    });

    const api = (method: string, path: string, body?: unknown) => {
      const headers: Record<string, string> = { authorization: `Bearer ${env.API_TOKEN}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      return worker.fetch(
        new Request(`http://worker${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
        testEnv(),
        createExecutionContext() as never,
      );
    };

    it("a transactional kind on the Worker's own connections: the failed attempt's write is rolled back, the second commits once with its completion; the log says why it failed", async () => {
      const [job] = await enqueueMany(h.db, [{ kind: 'tx', payload: {}, keepSeconds: 60 }]);
      const warnings = vi.spyOn(console, 'warn').mockImplementation(() => {});
      try {
        expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ failed: 1, completed: 0 });
        const lines = warnings.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
        expect(lines).toContainEqual({
          event: 'attempt_failed',
          jobId: job!.id,
          kind: 'tx',
          attempt: 1,
          maxAttempts: expect.any(Number),
          retryAt: expect.stringMatching(/^\d{4}-/),
          error: 'first attempt fails after writing',
          message: expect.stringMatching(
            /^job \d+ \(tx\) attempt 1 of \d+ failed: first attempt fails after writing; it runs/,
          ),
        });
      } finally {
        warnings.mockRestore();
      }
      expect(await h.query('SELECT attempt FROM public.lifecycle_writes')).toEqual([]);
      await h.query(`UPDATE pgdrain.jobs SET run_at = now()`);
      expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ completed: 1 });
      expect(await h.query('SELECT job_id::text, attempt FROM public.lifecycle_writes')).toEqual([
        { job_id: job!.id, attempt: 2 },
      ]);
      const read = await (await api('GET', `/jobs/${job!.id}`)).json();
      expect(read).toMatchObject({
        status: 'completed',
        attempts: 2,
        result: { attempt: 2 },
        finishedAt: expect.any(String),
      });
    });

    it('each cron invocation prunes the kept jobs whose time is up', async () => {
      await h.query(`INSERT INTO pgdrain.jobs (kind, payload, status, finished_at, keep_until)
                     SELECT 'kept', '{}', 'completed', now(), now() + CASE WHEN n <= 3 THEN interval '-1 second' ELSE interval '1 hour' END
                       FROM generate_series(1, 5) AS n`);
      expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ pruned: 3, claimed: 0 });
      // The two still kept moved to the history (rows an older version kept in pgdrain.jobs).
      expect(await count(`status = 'completed'`)).toBe(0);
      expect(Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.job_history`))[0]!.n)).toBe(2);
    });

    it('GET /jobs/:id?waitSeconds on the Worker polls within its request and answers once a cron completes the job', async () => {
      const [job] = await enqueueMany(h.db, [{ kind: 'kept', payload: { ms: 300 }, keepSeconds: 60 }]);
      const started = Date.now();
      const waiting = api('GET', `/jobs/${job!.id}?waitSeconds=10`);
      await new Promise((r) => setTimeout(r, 200));
      await worker.runScheduled(cron(), testEnv());
      const res = await waiting;
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ id: job!.id, status: 'completed', result: { slept: 300 } });
      expect(Date.now() - started).toBeLessThan(5_000);
      // Out of range: refused before anything is read.
      expect((await api('GET', `/jobs/${job!.id}?waitSeconds=61`)).status).toBe(400);
    });

    it('waits hold no database connection while they wait: 40 at once leave enqueue working and most connections free', async () => {
      const [job] = await enqueueMany(h.db, [
        { kind: 'kept', payload: { ms: 0 }, runAt: new Date(Date.now() + 3_600_000) },
      ]);
      const backends = async () =>
        Number(
          (
            await h.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
            )
          )[0]!.n,
        );
      const before = await backends();
      const waits = Array.from({ length: 40 }, () => api('GET', `/jobs/${job!.id}?waitSeconds=4`));
      const seen: number[] = [];
      for (let i = 0; i < 10; i++) {
        await new Promise((r) => setTimeout(r, 250));
        seen.push((await backends()) - before);
      }
      // One wait holding one connection would be 40 more all along; a look holds one for moments, and
      // once the looks spread out (each wait's next after a longer, jittered pause) moments come when
      // almost none is held. Counted on the Hyperdrive path: on the Neon path the local WebSocket
      // proxy, like Neon's, keeps up to 20 logged-in backends of its own for the next connect.
      if (path.name === 'Hyperdrive') expect(Math.min(...seen.slice(5))).toBeLessThan(10);
      expect((await api('POST', '/jobs', { kind: 'count', payload: { n: 1 } })).status).toBe(201);
      const answers = await Promise.all(waits);
      expect(answers.map((r) => r.status)).toEqual(Array(40).fill(200));
      for (const r of answers) expect(await r.json()).toMatchObject({ id: job!.id, status: 'pending' });
    });

    it('POST /jobs/:id/cancel reaches a handler a cron invocation runs: aborted within a third of the visibility plus a second, the job ends cancelled', async () => {
      const [job] = await enqueueMany(h.db, [{ kind: 'cancellable', payload: {} }]);
      const draining = worker.runScheduled(
        cron(),
        testEnv({ VISIBILITY_TIMEOUT_SECONDS: '3', DRAIN_BUDGET_MS: '8000' }),
      );
      for (let i = 0; i < 100 && (await count(`status = 'running'`)) === 0; i++)
        await new Promise((r) => setTimeout(r, 30));
      const askedAt = Date.now();
      const res = await api('POST', `/jobs/${job!.id}/cancel`);
      expect(res.status).toBe(202);
      expect(await res.json()).toEqual({ id: job!.id, status: 'running', cancelRequested: true });
      const report = await draining;
      expect(report).toMatchObject({ cancelled: 1, failed: 0 });
      expect(abortedAt.get(job!.id)! - askedAt).toBeLessThan(2_000);
      expect(await count()).toBe(0); // cancelled, and its kind keeps nothing
      expect((await api('POST', `/jobs/${job!.id}/cancel`)).status).toBe(404);
    });

    it('a job enqueued through the Worker API runs at the next cron, its row is gone, and one JSON line is logged', async () => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request('http://worker/jobs', {
          method: 'POST',
          headers: { authorization: `Bearer ${env.API_TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'count', payload: { n: 7 } }),
        }),
        testEnv(),
        ctx as never,
      );
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(201);
      expect(await count()).toBe(1);

      const log = vi.spyOn(console, 'log').mockImplementation(() => {});
      const sctx = createExecutionContext();
      await worker.scheduled(cron(), testEnv(), sctx);
      await waitOnExecutionContext(sctx);
      const lines = log.mock.calls.map((c) => JSON.parse(String(c[0])));
      log.mockRestore();
      expect(runs.get(7)).toBe(1);
      expect(await count()).toBe(0);
      expect(lines).toEqual([
        expect.objectContaining({
          event: 'scheduled',
          cron: '* * * * *',
          claimed: 1,
          completed: 1,
          failed: 0,
          dead: 0,
          released: 0,
          reaped: 0,
          elapsedMs: expect.any(Number),
        }),
      ]);
    });

    it('a backlog bigger than the budget: returns within budget + 1 s, leaves nothing running, and the next cron finishes', async () => {
      await enqueueMany(
        h.db,
        Array.from({ length: 500 }, () => ({ kind: 'sleep', payload: { ms: 30 } })),
      );
      const budgetMs = 1500;
      const started = Date.now();
      const first = await worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: String(budgetMs) }));
      expect(Date.now() - started).toBeLessThan(budgetMs + 1000);
      expect(first.stoppedBy).toBe('budget');
      expect(first.completed).toBeGreaterThan(0);
      expect(first.completed).toBeLessThan(500);
      expect(first.claimed).toBe(first.completed + first.failed + first.dead + first.released);
      expect(await count(`status = 'running'`)).toBe(0);
      // Every job not completed is pending; only those whose handler was cut by the budget spent an attempt.
      expect(await count(`status = 'pending'`)).toBe(500 - first.completed);
      expect(await count(`status = 'pending' AND attempts = 0`)).toBe(500 - first.completed - first.failed);

      const second = await worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: '20000' }));
      expect(second.stoppedBy).toBe('empty');
      // Every job the budget never reached ran; what is left is budget-cut ones waiting out their
      // backoff (about a second: on a loaded machine the second drain may outlast it and run them too).
      expect(await count(`attempts = 0`)).toBe(0);
      expect(await count()).toBeLessThanOrEqual(first.failed);
      expect(await count(`NOT (status = 'pending' AND attempts = 1 AND last_error LIKE '%budget%')`)).toBe(0);
    });

    it('a slow handler holds nothing back in a cron drain: jobs enqueued behind its back while it runs start within the poll, before it ends', async () => {
      await enqueueMany(h.db, [{ kind: 'sleep', payload: { ms: 5_000 } }]);
      const invocation = worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: '12000' }));
      for (let i = 0; i < 100 && (await count(`status = 'running'`)) === 0; i++)
        await new Promise((r) => setTimeout(r, 30));
      await enqueueMany(
        h.db,
        Array.from({ length: 3 }, (_, n) => ({ kind: 'count', payload: { n } })),
      );
      for (let waited = 0; runs.size < 3; waited += 50) {
        if (waited > 4_000) throw new Error(`the quick jobs waited for the slow one: ${runs.size} of 3 ran`);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(await count(`kind = 'sleep' AND status = 'running'`)).toBe(1);
      expect(await invocation).toMatchObject({ claimed: 4, completed: 4 });
    });

    it('a handler that never resolves: the invocation still ends within budget + 1 s and the job is failed, not lost', async () => {
      await enqueueMany(h.db, [
        { kind: 'hang', payload: {} },
        { kind: 'count', payload: { n: 1 } },
      ]);
      const budgetMs = 1500;
      const started = Date.now();
      const report = await worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: String(budgetMs) }));
      expect(Date.now() - started).toBeLessThan(budgetMs + 1000);
      expect(report).toMatchObject({ claimed: 2, completed: 1, failed: 1 });
      expect(await h.query(`SELECT kind, status, attempts, locked_by, last_error FROM pgdrain.jobs`)).toEqual([
        {
          kind: 'hang',
          status: 'pending',
          attempts: 1,
          locked_by: null,
          last_error: expect.stringContaining('budget'),
        },
      ]);
    });

    it('housekeeping goes beside the drain: a roll-up held up by a lock does not hold the jobs back', async () => {
      await enqueueMany(
        h.db,
        Array.from({ length: 20 }, (_, n) => ({ kind: 'count', payload: { n } })),
      );
      // Another session holds the totals table the roll-up writes; the drain never touches it.
      const holder = await h.transactions();
      await holder.db.execute(sql`BEGIN`);
      await holder.db.execute(sql`LOCK TABLE pgdrain.job_totals IN ACCESS EXCLUSIVE MODE`);
      let settled = false;
      const invocation = worker
        .runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: '10000' }))
        .finally(() => (settled = true));
      try {
        for (let waited = 0; (await count()) > 0; waited += 50) {
          if (waited > 8_000) throw new Error(`the drain waited for the housekeeping: ${await count()} jobs left`);
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(runs.size).toBe(20);
        expect(settled).toBe(false); // the invocation still waits for its housekeeping
      } finally {
        await holder.db.execute(sql`ROLLBACK`);
        holder.giveBack(false);
      }
      expect(await invocation).toMatchObject({ claimed: 20, completed: 20, reaped: 0 });
    });

    it('a stale running row is reaped by the next cron and then completed', async () => {
      await h.query(
        `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, locked_at, locked_by)
         VALUES ('count', '{"n": 99}', 'running', 1, now() - interval '10 minutes', 'worker-that-died:1')`,
      );
      const report = await worker.runScheduled(cron(), testEnv({ VISIBILITY_TIMEOUT_SECONDS: '300' }));
      expect(report).toMatchObject({ reaped: 1, claimed: 1, completed: 1 });
      expect(runs.get(99)).toBe(1);
      expect(await count()).toBe(0);
    });

    it("a settlement the database refuses is logged (settle_failed: the drainer, the database's words), and its job stays running until the reaper hands it on", async () => {
      // A user's trigger gone wrong: it refuses to delete one job, so every completion of it fails.
      await h.query(`CREATE OR REPLACE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'a trigger refuses to delete job %', OLD.id; END $$`);
      await h.query(`CREATE TRIGGER refuse_delete BEFORE DELETE ON pgdrain.jobs FOR EACH ROW
        WHEN (OLD.payload->>'n' = '13') EXECUTE FUNCTION public.refuse_delete()`);
      const errors = vi.spyOn(console, 'error').mockImplementation(() => {});
      try {
        await enqueueMany(h.db, [{ kind: 'count', payload: { n: 13 } }]);
        const report = await worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: '3000' }));
        const lines = errors.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, string>);
        expect(runs.get(13)).toBe(1);
        // The report counts it: its claims add up to what it settled and what it could not.
        expect(report).toMatchObject({ claimed: 1, completed: 0, lost: 0, unsettled: 1 });
        // The line names the drain, as the invocation's report (and the job's locked_by) do.
        expect(report.drainer).toMatch(/^worker-\d+-[0-9a-f]{8}$/);
        expect(lines).toContainEqual({
          event: 'settle_failed',
          drainer: report.drainer,
          error: expect.stringMatching(/a trigger refuses to delete job \d+/),
        });
        expect(JSON.stringify(lines)).not.toContain(String(env.SCHEDULED_DATABASE_URL));
        // The connection the pool closed after the failed statement is not a pool error of its own.
        expect(lines.filter((l) => l.event === 'pool_error')).toEqual([]);
        expect(await count(`status = 'running'`)).toBe(1);
      } finally {
        errors.mockRestore();
        await h.query('DROP TRIGGER refuse_delete ON pgdrain.jobs');
      }
      // Its lease ends: the next cron reaps it and runs it again (at least once, as promised).
      await h.query(`UPDATE pgdrain.jobs SET locked_until = now() - interval '1 second'`);
      expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ reaped: 1, completed: 1 });
      expect(runs.get(13)).toBe(2);
      expect(await count()).toBe(0);
    });

    it('webhook deliveries are signed in workerd as on Node: the published verifier accepts them', async () => {
      const secret = `whsec_${btoa('k'.repeat(32))}`;
      const sent: { body: string; headers: Headers }[] = [];
      const registry = new JobRegistry([
        createWebhookJob({
          allowedHosts: ['hooks.example.com'],
          signingKeys: parseSigningSecrets(secret),
          fetch: async (_url, init) => {
            sent.push({ body: String(init?.body), headers: new Headers(init?.headers) });
            return new Response(null, { status: 204 });
          },
        }),
      ]);
      const [job] = await enqueueMany(h.db, [
        { kind: 'webhook', payload: { url: 'https://hooks.example.com/x', body: { n: 1 } } },
      ]);
      expect(await drain(h.db, registry, { workerId: 'sign', placement: 'far' })).toMatchObject({ completed: 1 });
      const headers = Object.fromEntries(
        ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((name) => [name, sent[0]!.headers.get(name)!]),
      );
      expect(headers['webhook-id']).toBe(`msg_${job!.id}`);
      expect(new Webhook(secret).verify(sent[0]!.body, headers)).toEqual({ n: 1 });
    });

    it('a Worker with a short visibility timeout leaves alone the jobs a sidecar holds on a longer lease', async () => {
      // A sidecar (VISIBILITY_TIMEOUT_SECONDS=30) claimed these 5 s ago and renews them; the
      // Worker next to it is set to 2 s. Its reap applies the holder's lease, not its own.
      await enqueueMany(
        h.db,
        Array.from({ length: 3 }, (_, n) => ({ kind: 'count', payload: { n } })),
      );
      await claim(h.db, { batchSize: 3, lockToken: 'sidecar-elsewhere:1', visibilityTimeoutSeconds: 30 });
      await h.query(
        `UPDATE pgdrain.jobs SET locked_at = locked_at - interval '5 seconds', locked_until = locked_until - interval '5 seconds'`,
      );
      const report = await worker.runScheduled(
        cron(),
        testEnv({ VISIBILITY_TIMEOUT_SECONDS: '2', DRAIN_BUDGET_MS: '1000' }),
      );
      expect(report).toMatchObject({ reaped: 0, reapedDead: 0, claimed: 0 });
      expect(await count(`status = 'running' AND locked_by = 'sidecar-elsewhere:1'`)).toBe(3);
      expect(runs.size).toBe(0);
    });

    it('two overlapping invocations on the same backlog run every job exactly once', async () => {
      await enqueueMany(
        h.db,
        Array.from({ length: 300 }, (_, n) => ({ kind: 'count', payload: { n } })),
      );
      const [a, b] = await Promise.all([
        worker.runScheduled(cron(), testEnv()),
        worker.runScheduled(cron(), testEnv()),
      ]);
      expect(a!.claimed + b!.claimed).toBe(300);
      expect(a!.completed + b!.completed).toBe(300);
      expect(runs.size).toBe(300);
      expect([...runs.values()].every((c) => c === 1)).toBe(true);
      expect(await count()).toBe(0);
    });

    it('scheduled() enqueues the slots its schedules owe, then drains them in the same invocation', async () => {
      const scheduledWorker = createWorker({
        jobs: [countJob],
        schedules: [defineSchedule({ name: 'each-minute', cron: '* * * * *', kind: 'count', payload: { n: 1000 } })],
      });
      // The first evaluation only records where the schedule starts.
      expect(await scheduledWorker.runScheduled(cron(), testEnv())).toMatchObject({ scheduled: 0, claimed: 0 });
      // Three minutes later (the state row moved back): the latest slot is owed, two were missed.
      await h.query(`UPDATE pgdrain.schedules SET last_slot = date_trunc('minute', now()) - interval '3 minutes'`);
      const report = await scheduledWorker.runScheduled(cron(), testEnv());
      expect(report).toMatchObject({ scheduled: 1, claimed: 1, completed: 1 });
      expect(runs.get(1000)).toBe(1);
      expect(
        await h.query(`SELECT skipped::int, last_slot = date_trunc('minute', now()) AS current FROM pgdrain.schedules`),
      ).toEqual([{ skipped: 2, current: true }]);
      const list = await scheduledWorker.fetch(
        new Request('http://worker/schedules', { headers: { authorization: `Bearer ${env.API_TOKEN}` } }),
        testEnv(),
        createExecutionContext() as never,
      );
      expect(((await list.json()) as { schedules: { name: string }[] }).schedules.map((s) => s.name)).toEqual([
        'each-minute',
      ]);
    });

    it('a paused kind is not claimed by scheduled() while other kinds are; resumed, the next cron drains it', async () => {
      await enqueueMany(h.db, [
        ...Array.from({ length: 5 }, (_, n) => ({ kind: 'count', payload: { n } })),
        ...Array.from({ length: 3 }, () => ({ kind: 'sleep', payload: { ms: 1 } })),
      ]);
      await h.query(`INSERT INTO pgdrain.paused_kinds (kind) VALUES ('count')`);
      expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ claimed: 3, completed: 3 });
      expect(runs.size).toBe(0);
      expect(await count(`kind = 'count' AND status = 'pending' AND attempts = 0`)).toBe(5);
      await h.query(`DELETE FROM pgdrain.paused_kinds`);
      expect(await worker.runScheduled(cron(), testEnv())).toMatchObject({ claimed: 5, completed: 5 });
      expect(runs.size).toBe(5);
    });

    it("with no DRAIN_BUDGET_MS the budget runs until a second before the same cron's next tick; the next invocation continues", async () => {
      await enqueueMany(
        h.db,
        Array.from({ length: 1000 }, () => ({ kind: 'sleep', payload: { ms: 30 } })),
      );
      // A cron every 4 seconds (croner reads a seconds field; Cloudflare's crons are minutes, the
      // arithmetic is the same): the invocation of the last tick has until 1 s before the next.
      const scheduledTime = Math.floor(Date.now() / 4_000) * 4_000;
      const nextTick = scheduledTime + 4_000;
      const started = Date.now();
      const first = await worker.runScheduled(
        { cron: '*/4 * * * * *', scheduledTime },
        testEnv({ DRAIN_BUDGET_MS: '' }),
      );
      const expected = Math.max(1_000, nextTick - 1_000 - started);
      expect(first.budgetMs).toBeGreaterThan(expected - 300);
      expect(first.budgetMs).toBeLessThanOrEqual(expected);
      expect(first.stoppedBy).toBe('budget');
      expect(Date.now() - started).toBeLessThan(first.budgetMs + 1_000);
      expect(await count(`status = 'running'`)).toBe(0);
      const second = await worker.runScheduled(cron(), testEnv({ DRAIN_BUDGET_MS: '25000' }));
      // Everything ran or waits out the backoff of an attempt the first budget cut short.
      expect(first.completed + second.completed + (await count())).toBe(1000);
      expect(await count(`status = 'pending' AND attempts = 0`)).toBe(0);
    });

    it('a */5 cron gets about five minutes; an explicit DRAIN_BUDGET_MS wins', async () => {
      const now = Date.now();
      const tick = Math.floor(now / 300_000) * 300_000;
      const fiveMinutes = await worker.runScheduled(
        { cron: '*/5 * * * *', scheduledTime: tick },
        testEnv({ DRAIN_BUDGET_MS: '' }),
      );
      // Never less than a second, even when the next tick is closer than that.
      expect(fiveMinutes.budgetMs).toBeGreaterThan(Math.max(1_000, tick + 300_000 - 1_000 - now) - 500);
      expect(fiveMinutes.budgetMs).toBeLessThanOrEqual(Math.max(1_000, tick + 300_000 - 1_000 - now));
      expect(fiveMinutes.stoppedBy).toBe('empty');
      expect(
        (await worker.runScheduled({ cron: '*/5 * * * *', scheduledTime: tick }, testEnv({ DRAIN_BUDGET_MS: '1500' })))
          .budgetMs,
      ).toBe(1500);
    });

    describe('runNow', () => {
      const post = async (path: string, body: unknown) => {
        const ctx = createExecutionContext();
        const res = await worker.fetch(
          new Request(`http://worker${path}`, {
            method: 'POST',
            headers: { authorization: `Bearer ${env.API_TOKEN}`, 'content-type': 'application/json' },
            body: JSON.stringify(body),
          }),
          testEnv(),
          ctx as never,
        );
        return { res, ctx };
      };

      it('a job posted with runNow runs in the same invocation after the response, with no cron', async () => {
        const { res, ctx } = await post('/jobs', { kind: 'count', payload: { n: 501 }, runNow: true });
        expect(res.status).toBe(201);
        await waitOnExecutionContext(ctx);
        expect(runs.get(501)).toBe(1);
        expect(await count()).toBe(0);
      });

      it('every job of an eager kind runs at once', async () => {
        const { ctx } = await post('/jobs', { kind: 'eager', payload: { n: 502 } });
        await waitOnExecutionContext(ctx);
        expect(runs.get(502)).toBe(1);
        expect(await count()).toBe(0);
      });

      it('racing a cron invocation for the same job, it runs exactly once', async () => {
        const [{ ctx }] = await Promise.all([
          post('/jobs', { kind: 'count', payload: { n: 503 }, runNow: true }),
          worker.runScheduled(cron(), testEnv()),
        ]);
        await waitOnExecutionContext(ctx);
        await worker.runScheduled(cron(), testEnv()); // whatever the first cron missed
        expect(runs.get(503)).toBe(1);
        expect(await count()).toBe(0);
      });

      it('a handler that fails leaves the job pending with its backoff, like any failure', async () => {
        const { res, ctx } = await post('/jobs', { kind: 'fails', payload: {}, runNow: true });
        const { id } = (await res.json()) as { id: string };
        await waitOnExecutionContext(ctx);
        expect(
          await h.query(
            `SELECT status, attempts, run_at > now() AS later, last_error FROM pgdrain.jobs WHERE id = $1`,
            [id],
          ),
        ).toEqual([{ status: 'pending', attempts: 1, later: true, last_error: 'run-now failure' }]);
      });

      it('a batch with runNow whose slow jobs hold most slots: the quick ones run in the free slot, before the slow ones end', async () => {
        // Quick, but not so quick next to a claim that claims grow to take everything at once.
        const slow = Array.from({ length: 4 }, () => ({ kind: 'sleep', payload: { ms: 3_000 }, runNow: true }));
        const quick = Array.from({ length: 4 }, () => ({ kind: 'sleep', payload: { ms: 100 }, runNow: true }));
        const { res, ctx } = await post('/jobs/batch', { jobs: [...slow, ...quick] });
        expect(await res.json()).toMatchObject({ runNow: { started: 8, deferred: 0 } });
        for (let waited = 0; (await count()) > 4; waited += 50) {
          if (waited > 2_500) throw new Error(`the quick jobs waited for the slow ones: ${await count()} of 8 left`);
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(await count(`status = 'running'`)).toBe(4);
        await waitOnExecutionContext(ctx);
        expect(await count()).toBe(0);
      });

      it('a batch with runNow starts at most 20 and says how many wait for the cron', async () => {
        const { res, ctx } = await post('/jobs/batch', {
          jobs: Array.from({ length: 30 }, (_, i) => ({ kind: 'count', payload: { n: 600 + i }, runNow: true })),
        });
        expect(await res.json()).toMatchObject({ runNow: { started: 20, deferred: 10 } });
        await waitOnExecutionContext(ctx);
        expect(runs.size).toBe(20);
        expect(await count(`status = 'pending' AND attempts = 0`)).toBe(10);
      });
    });
  });
}
