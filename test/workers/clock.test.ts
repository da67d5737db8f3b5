// The queue's clock inside workerd (src/worker/clock.ts): a Durable Object whose alarm rings when
// something is due — with no cron tick at all here — and a cron that asks it first and leaves the
// database alone when nothing is. Its alarms ring by themselves in real time; each test waits for
// what they do. The clock's database and kinds are its own (test/workers/main.ts).
import {
  createExecutionContext,
  createScheduledController,
  env,
  runDurableObjectAlarm,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { alarmAt, decide, emptyClock, leaseTaken, looked, queueClock, told } from '../../src/worker/clock.ts';
import type { Env } from '../../src/worker/create-worker.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { clockQueue, scheduleQueue } from './clock-kinds.ts';
import { createNeonHarness } from './neon-harness.ts';
import { sleep, until } from '../support/time.ts';

describe("the clock's decisions", () => {
  it('a new clock looks at once; then only what is due, or the backstop', () => {
    const hour = 3_600_000;
    expect(decide(emptyClock(), 1_000, hour)).toEqual({ drain: true, housekeep: true, reason: 'due' });
    const afterLook = looked(emptyClock(), { startedAt: 1_000, drainAt: null, housekeepAt: 50_000 }, 2_000);
    expect(decide(afterLook, 10_000, hour)).toEqual({ drain: false, housekeep: false, reason: 'idle' });
    expect(decide(afterLook, 50_000, hour)).toMatchObject({ housekeep: true, drain: false });
    expect(decide(afterLook, 1_000 + hour, hour)).toMatchObject({
      drain: true,
      reason: expect.stringMatching(/due|backstop/),
    });
    expect(decide(told(afterLook, 20_000, 5_000), 20_000, hour)).toMatchObject({ drain: true, reason: 'due' });
    // BACKSTOP_POLL_SECONDS=0: every invocation looks, as without a clock.
    expect(decide(afterLook, 2_001, 0)).toMatchObject({ drain: true });
    expect(alarmAt(afterLook, hour)).toBe(50_000);
  });

  it('a look that ends keeps what was told after it began, and forgets what it has seen', () => {
    let state = told(emptyClock(), 5_000, 100);
    state = told(state, 9_000, 200);
    // A look began at 150: the tell at 100 it saw, the one at 200 maybe not.
    expect(looked(state, { startedAt: 150, drainAt: 30_000 }, 300).drainAt).toBe(9_000);
    expect(looked(state, { startedAt: 250, drainAt: 30_000 }, 300).drainAt).toBe(30_000);
    // Many tells keep few entries: a later, earlier moment makes earlier tells redundant.
    for (let i = 0; i < 1_000; i++) state = told(state, 100_000 - i, 1_000 + i);
    expect(state.told.length).toBeLessThan(5);
  });

  it("a look that did not drain keeps the drain's moment; a lease told during a housekeeping look outlives it", () => {
    const known = told(emptyClock(), 90_000, 100);
    // Housekeeping alone (a lease's end): it learnt nothing of the jobs.
    expect(looked(known, { startedAt: 1_000, housekeepAt: 500_000 }, 2_000)).toMatchObject({
      drainAt: 90_000,
      housekeepAt: 500_000,
    });
    // Another invocation took a lease ending at 40,000 while this look ran: its reap is still due then.
    const during = leaseTaken(known, 40_000, 1_500);
    expect(looked(during, { startedAt: 1_000, drainAt: 90_000, housekeepAt: 500_000 }, 2_000).housekeepAt).toBe(40_000);
    expect(looked(during, { startedAt: 1_600, drainAt: 90_000, housekeepAt: 500_000 }, 2_000).housekeepAt).toBe(
      500_000,
    );
  });
});

describe('scheduled() and the alarm with the clock (Neon path)', () => {
  let h: Harness;
  // The mode in which the database may sleep (BACKSTOP_POLL_SECONDS over 0), which most of these
  // tests are about; the default, every cron looks, has a test of its own below.
  const clockEnv = (vars: Partial<Env> = {}): Env =>
    ({
      ...(env as unknown as Env),
      DATABASE_URL: env.CLOCK_DATABASE_URL,
      PGDRAIN_CLOCK: env.TEST_CLOCK,
      BACKSTOP_POLL_SECONDS: '3600',
      ...vars,
    }) as Env;
  const clock = () => queueClock(clockEnv())!;
  const cron = () => createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() });
  const api = async (method: string, path: string, body?: unknown) => {
    const ctx = createExecutionContext();
    const res = await clockQueue.fetch(
      new Request(`http://worker${path}`, {
        method,
        headers: { authorization: `Bearer ${env.API_TOKEN}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
      clockEnv(),
      ctx as never,
    );
    await waitOnExecutionContext(ctx);
    return res;
  };
  /** The runs recorded with `tag`, once there are `n` of them (or after `ms`). */
  /** The jobs left once every completion has committed (0), waiting up to 5 s for them. */
  const jobsGone = () =>
    until(
      async () => Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n),
      (n) => n === 0,
      5_000,
      'the completions to commit',
    );
  const runs = async (tag: string, n = 1, ms = 8_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const rows = await h.query<{ job_id: string; attempt: number; late_ms: number }>(
        `SELECT job_id::text, attempt, (extract(epoch FROM started_at - run_at) * 1000)::float8 AS late_ms FROM public.clock_runs WHERE tag = $1 ORDER BY started_at`,
        [tag],
      );
      if (rows.length >= n || Date.now() > deadline) return rows;
      await sleep(100);
    }
  };

  beforeAll(async () => {
    h = await createNeonHarness(env.CLOCK_DATABASE_URL);
    await h.query(
      'CREATE TABLE IF NOT EXISTS public.clock_runs (tag text, job_id bigint, attempt int, run_at timestamptz, started_at timestamptz DEFAULT clock_timestamp())',
    );
  });
  afterAll(() => h?.close());
  beforeEach(async () => {
    await resetQueue(h, ['public.clock_runs']);
    await clock().reset();
  });

  it('an idle queue: the first cron looks, the next ones send the database nothing', async () => {
    const first = await clockQueue.runScheduled(cron(), clockEnv());
    expect(first.looked).toBe('drain');
    for (let i = 0; i < 10; i++)
      expect(await clockQueue.runScheduled(cron(), clockEnv())).toMatchObject({ looked: 'idle', claimed: 0 });
    // The clock knows when housekeeping next has work (the history's partitions, tomorrow), and nothing for a drain.
    const state = await clock().state();
    expect(state.drainAt).toBeNull();
    expect(state.housekeepAt).toBeGreaterThan(Date.now());
  });

  it('a job enqueued through the API with a delay starts within a second of its run_at, with no cron tick', async () => {
    await clockQueue.runScheduled(cron(), clockEnv()); // the clock has looked: idle from here on
    const res = await api('POST', '/jobs', { kind: 'clock-run', payload: { tag: 'delayed' }, delaySeconds: 2 });
    expect(res.status).toBe(201);
    expect((await clock().state()).drainAt).toBeGreaterThan(Date.now());
    const [run] = await runs('delayed');
    expect(run, 'the alarm ran it').toBeDefined();
    expect(run!.late_ms).toBeGreaterThanOrEqual(0);
    expect(run!.late_ms).toBeLessThan(1_000);
  });

  it('a retry after its backoff, and an `after` child once its parent completed, start on time too', async () => {
    await clockQueue.runScheduled(cron(), clockEnv());
    await api('POST', '/jobs', { kind: 'clock-fail-once', payload: { tag: 'retry' } });
    const [retried] = await runs('retry');
    expect(retried).toMatchObject({ attempt: 2 });
    expect(retried!.late_ms).toBeLessThan(1_000);
    const parent = await (
      await api('POST', '/jobs', { kind: 'clock-run', payload: { tag: 'parent' }, delaySeconds: 1 })
    ).json();
    await api('POST', '/jobs', { kind: 'clock-run', payload: { tag: 'child' }, after: [parent.id] });
    const [child] = await runs('child');
    const [ranParent] = await runs('parent');
    expect(child, 'the child ran in the drain that completed its parent').toBeDefined();
    expect(ranParent!.late_ms).toBeLessThan(1_000);
  });

  it('a workflow: its sleep wakes by the alarm at its end, and an event sent through the API runs it on, with no cron tick', async () => {
    await clockQueue.runScheduled(cron(), clockEnv());
    const res = await api('POST', '/jobs', { kind: 'clock-flow', payload: { tag: 'flow' } });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    const [started] = await runs('flow-start');
    expect(started, 'the alarm started the run').toBeDefined();
    const [woke] = await runs('flow-woke', 1, 10_000);
    expect(woke, 'the alarm woke it after its sleep').toBeDefined();
    // It woke within a second of the sleep's end (1.5 s after the step before it).
    const [gap] = await h.query<{ late_ms: number }>(
      `SELECT (extract(epoch FROM w.run_at - s.run_at) * 1000 - 1500)::float8 AS late_ms
         FROM public.clock_runs s, public.clock_runs w WHERE s.tag = 'flow-start' AND w.tag = 'flow-woke'`,
    );
    expect(gap!.late_ms).toBeGreaterThanOrEqual(0);
    expect(gap!.late_ms).toBeLessThan(1_000);
    // Now it waits for its event, holding nothing.
    for (const deadline = Date.now() + 5_000; Date.now() < deadline; await sleep(50)) {
      if (
        (
          await h.query(
            `SELECT 1 FROM pgdrain.workflow_steps WHERE job_id = $1 AND name = 'go' AND status = 'waiting'`,
            [id],
          )
        ).length > 0
      )
        break;
    }
    expect(await h.query(`SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([
      { status: 'waiting', locked_by: null },
    ]);
    expect((await api('POST', '/events', { event: 'clock.go', key: 'flow:flow', payload: { n: 7 } })).status).toBe(201);
    const [done] = await runs('flow-done-7');
    expect(done, 'the event ran it on, by the alarm').toBeDefined();
    // The step's effect is seen before the run's completion commits: the job goes right after it.
    expect(await jobsGone()).toBe(0);
  }, 30_000);

  it('a lease that ended on a killed invocation: reaped when it ends, and run then', async () => {
    await clockQueue.runScheduled(cron(), clockEnv());
    // A drain claimed it and was killed: the job is running with a lease ending in 1.5 s, and the
    // drain told the clock so when it claimed (onLeaseTaken).
    const [job] = await h.query<{ id: string; until: Date }>(
      `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, locked_at, locked_by, locked_until)
       VALUES ('clock-run', '{"tag": "killed"}', 'running', 1, now(), 'worker-killed:1', now() + interval '1.5 seconds') RETURNING id::text, locked_until AS until`,
    );
    await clock().leaseTaken(new Date(job!.until).getTime());
    const [run] = await runs('killed');
    // The killed invocation's attempt was refunded (counted as lost): this run is attempt 1 again.
    expect(run).toMatchObject({ job_id: job!.id, attempt: 1 });
    const late = (
      await h.query<{ ms: number }>(
        `SELECT (extract(epoch FROM started_at - $1::timestamptz) * 1000)::float8 AS ms FROM public.clock_runs WHERE tag = 'killed'`,
        [job!.until],
      )
    )[0]!.ms;
    expect(late).toBeLessThan(1_500);
  });

  it("by default every cron looks: a job enqueued in SQL behind the Worker's back runs at the next cron", async () => {
    const byDefault = { BACKSTOP_POLL_SECONDS: undefined } as Partial<Env>;
    await clockQueue.runScheduled(cron(), clockEnv(byDefault));
    expect(await clockQueue.runScheduled(cron(), clockEnv(byDefault))).toMatchObject({ looked: 'drain', claimed: 0 });
    await h.query(`SELECT pgdrain.enqueue('clock-run', '{"tag": "sql-default"}')`);
    expect(await clockQueue.runScheduled(cron(), clockEnv(byDefault))).toMatchObject({ looked: 'drain', completed: 1 });
    expect(await runs('sql-default')).toHaveLength(1);
  });

  it("a job enqueued in SQL behind the Worker's back runs at the backstop; a reset clock looks at the next cron", async () => {
    await clockQueue.runScheduled(cron(), clockEnv());
    await h.query(`SELECT pgdrain.enqueue('clock-run', '{"tag": "sql"}')`);
    const backstop = { BACKSTOP_POLL_SECONDS: '2' } as Partial<Env>;
    expect(await clockQueue.runScheduled(cron(), clockEnv(backstop))).toMatchObject({ looked: 'idle' });
    await sleep(2_100);
    expect(await clockQueue.runScheduled(cron(), clockEnv(backstop))).toMatchObject({ looked: 'drain', completed: 1 });
    // Lost state: nothing is lost, the next cron looks.
    await h.query(`SELECT pgdrain.enqueue('clock-run', '{"tag": "after-reset"}')`);
    await clock().reset();
    expect(await clockQueue.runScheduled(cron(), clockEnv())).toMatchObject({ looked: 'drain', completed: 1 });
    expect((await runs('sql')).length + (await runs('after-reset')).length).toBe(2);
  });

  it('a clock that cannot be reached does not stop the cron: it looks at everything, as without one', async () => {
    await h.query(`SELECT pgdrain.enqueue('clock-run', '{"tag": "unreachable"}')`);
    const failing = {
      idFromName: () => 'id',
      get: () => ({ fetch: () => Promise.reject(new Error('Durable Object unavailable')) }),
    };
    const report = await clockQueue.runScheduled(cron(), clockEnv({ PGDRAIN_CLOCK: failing } as Partial<Env>));
    expect(report).toMatchObject({ looked: 'drain', completed: 1 });
    expect(await runs('unreachable')).toHaveLength(1);
  });

  it('an alarm and crons at once on one backlog: every job runs exactly once', async () => {
    await clockQueue.runScheduled(cron(), clockEnv());
    await h.query(
      `SELECT pgdrain.enqueue('clock-run', jsonb_build_object('tag', 'crowd')) FROM generate_series(1, 60)`,
    );
    await clock().told(Date.now());
    const stub = env.TEST_CLOCK.get(env.TEST_CLOCK.idFromName('pgdrain'));
    await Promise.all([
      runDurableObjectAlarm(stub),
      clockQueue.runScheduled(cron(), clockEnv({ BACKSTOP_POLL_SECONDS: '0' } as Partial<Env>)),
      clockQueue.runScheduled(cron(), clockEnv({ BACKSTOP_POLL_SECONDS: '0' } as Partial<Env>)),
    ]);
    const rows = await runs('crowd', 60);
    expect(rows).toHaveLength(60);
    expect(new Set(rows.map((r) => r.job_id)).size).toBe(60);
    // A run is recorded as its handler starts; its completion commits after.
    expect(await jobsGone()).toBe(0);
  });
});

describe("a schedule's slot with the clock", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createNeonHarness(env.SCHEDULE_CLOCK_DATABASE_URL);
    await h.query(
      'CREATE TABLE IF NOT EXISTS public.clock_runs (tag text, job_id bigint, attempt int, run_at timestamptz, started_at timestamptz DEFAULT clock_timestamp())',
    );
  });
  afterAll(() => h?.close());

  it('is enqueued and run within a second of the slot, by the alarm, with no cron tick', async () => {
    const scheduleEnv = {
      ...(env as unknown as Env),
      DATABASE_URL: env.SCHEDULE_CLOCK_DATABASE_URL,
      PGDRAIN_CLOCK: env.TEST_SCHEDULE_CLOCK,
    } as Env;
    // One look (a cron) tells the clock the next slot; then nothing but its alarm.
    await scheduleQueue.runScheduled(
      createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() }),
      scheduleEnv,
    );
    const since = new Date();
    let rows: { late_ms: number }[] = [];
    for (const deadline = Date.now() + 25_000; rows.length < 1 && Date.now() < deadline; await sleep(200)) {
      rows = await h.query(
        `SELECT (extract(epoch FROM started_at - run_at) * 1000)::float8 AS late_ms FROM public.clock_runs WHERE tag = 'schedule' AND run_at > $1 ORDER BY started_at`,
        [since],
      );
    }
    expect(rows.length, 'a slot after the cron ran by the alarm').toBeGreaterThanOrEqual(1);
    expect(rows[0]!.late_ms).toBeLessThan(1_000);
    await queueClock(scheduleEnv)!.reset();
  }, 40_000);
});
