// Recurring schedules on a real PostgreSQL. The clock is passed in (the evaluation time stands in
// for the database's now()), so thirty minutes or three days pass in a second.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { JobRegistry, defineJob, noopJob } from '../src/jobs/index.ts';
import { checkSchedules, defineSchedule, describeSchedules, evaluateSchedules } from '../src/schedules.ts';
import { startSidecar } from '../src/sidecar/index.ts';

import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

let t: TestDatabase;
const report = defineJob({
  kind: 'report',
  schema: z.object({ scope: z.enum(['daily', 'hourly']) }),
  handler: () => {},
});
const registry = new JobRegistry([noopJob, report]);

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());
beforeEach(async () => {
  await resetQueue(t, ['pgdrain.schedules']);
});

const at = (iso: string) => new Date(iso);
const minutes = (n: number) => n * 60_000;
const jobTimes = async () =>
  (await t.query<{ run_at: Date }>(`SELECT run_at FROM pgdrain.jobs ORDER BY run_at`)).map((r) =>
    r.run_at.toISOString(),
  );

describe('recurring schedules', () => {
  it('a */5 schedule evaluated by 4 concurrent evaluators over 30 simulated minutes enqueues exactly 6 jobs', async () => {
    const every5 = defineSchedule({
      name: 'every-5',
      cron: '*/5 * * * *',
      kind: 'report',
      payload: { scope: 'hourly' },
    });
    const evaluators = Array.from({ length: 4 }, () => t.connect(2).db);
    const start = at('2026-06-01T10:00:00Z').getTime();
    // Every simulated 20 s, all four at once, each on its own connections.
    for (let ms = 0; ms <= minutes(30); ms += 20_000) {
      const now = new Date(start + ms);
      await Promise.all(evaluators.map((db) => evaluateSchedules(db, registry, [every5], { now })));
    }
    expect(await jobTimes()).toEqual(
      ['10:05', '10:10', '10:15', '10:20', '10:25', '10:30'].map((hm) => `2026-06-01T${hm}:00.000Z`),
    );
    expect(await t.query(`SELECT kind, payload FROM pgdrain.jobs GROUP BY kind, payload`)).toEqual([
      { kind: 'report', payload: { scope: 'hourly' } },
    ]);
    expect(await t.query(`SELECT name, last_slot, skipped::int FROM pgdrain.schedules`)).toEqual([
      { name: 'every-5', last_slot: at('2026-06-01T10:30:00Z'), skipped: 0 },
    ]);
  });

  it('a daily 02:30 in Europe/Berlin runs once a day across both DST changes, as croner resolves the missing and the repeated hour', async () => {
    const nightly = defineSchedule({
      name: 'nightly',
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      kind: 'report',
      payload: { scope: 'daily' },
    });
    const walk = async (fromIso: string, days: number) => {
      const from = at(fromIso).getTime();
      for (let ms = 0; ms <= days * 24 * 60 * 60_000; ms += minutes(10))
        await evaluateSchedules(t.db, registry, [nightly], { now: new Date(from + ms) });
    };
    // Spring forward (29 March 2026: 02:00 → 03:00, so 02:30 does not exist that night).
    await walk('2026-03-27T23:00:00Z', 3);
    expect(await jobTimes()).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // the missing 02:30 runs once, at 03:00 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
    await resetQueue(t, ['pgdrain.schedules']);
    // Fall back (25 October 2026: 03:00 → 02:00, so 02:30 happens twice): once.
    await walk('2026-10-23T23:00:00Z', 3);
    expect(await jobTimes()).toEqual([
      '2026-10-24T00:30:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
  });

  it('after a 2-hour gap: by default only the latest missed slot is enqueued and the rest counted as skipped; backfillSeconds enqueues its window', async () => {
    const plain = defineSchedule({ name: 'plain', cron: '*/10 * * * *', kind: 'noop', payload: {} });
    const backfilled = defineSchedule({
      name: 'backfilled',
      cron: '*/10 * * * *',
      kind: 'noop',
      payload: { b: 1 },
      backfillSeconds: 3600,
    });
    const before = at('2026-06-01T08:00:00Z');
    const after = new Date(before.getTime() + minutes(120) + 5_000);
    expect(await evaluateSchedules(t.db, registry, [plain, backfilled], { now: before })).toEqual([
      { name: 'backfilled', enqueued: 6, skipped: 0 }, // a new schedule with a backfill window owes that window once
      { name: 'plain', enqueued: 0, skipped: 0 },
    ]);
    await resetQueue(t);
    const reports = await evaluateSchedules(t.db, registry, [plain, backfilled], { now: after });
    // Slots in (08:00, 10:00]: 08:10 … 10:00, twelve of them.
    expect(reports).toEqual([
      { name: 'backfilled', enqueued: 6, skipped: 6 }, // 09:10 … 10:00 enqueued; 08:10 … 09:00 skipped
      { name: 'plain', enqueued: 1, skipped: 11 }, // 10:00 only
    ]);
    const rows = await t.query<{ payload: unknown; run_at: Date }>(
      `SELECT payload, run_at FROM pgdrain.jobs ORDER BY payload::text, run_at`,
    );
    expect(rows.filter((r) => JSON.stringify(r.payload) === '{}').map((r) => r.run_at.toISOString())).toEqual([
      '2026-06-01T10:00:00.000Z',
    ]);
    expect(
      rows.filter((r) => JSON.stringify(r.payload) !== '{}').map((r) => r.run_at.toISOString().slice(11, 16)),
    ).toEqual(['09:10', '09:20', '09:30', '09:40', '09:50', '10:00']);
    expect(await t.query(`SELECT name, skipped::int FROM pgdrain.schedules ORDER BY name`)).toEqual([
      { name: 'backfilled', skipped: 6 },
      { name: 'plain', skipped: 11 },
    ]);
  });

  it('a schedule removed from code stops, and its state row blocks nothing; GET /schedules data comes from code and state', async () => {
    const kept = defineSchedule({ name: 'kept', cron: '0 * * * *', kind: 'noop', payload: {} });
    const removed = defineSchedule({ name: 'removed', cron: '0 * * * *', kind: 'noop', payload: {} });
    await evaluateSchedules(t.db, registry, [kept, removed], { now: at('2026-06-01T08:30:00Z') });
    await evaluateSchedules(t.db, registry, [kept], { now: at('2026-06-01T09:00:30Z') });
    expect(await t.query(`SELECT name, last_slot FROM pgdrain.schedules ORDER BY name`)).toEqual([
      { name: 'kept', last_slot: at('2026-06-01T09:00:00Z') },
      { name: 'removed', last_slot: at('2026-06-01T08:30:00Z') },
    ]);
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`)).toEqual([{ n: 1 }]);
    expect(await describeSchedules(t.db, [kept], at('2026-06-01T09:10:00Z'))).toEqual([
      {
        name: 'kept',
        cron: '0 * * * *',
        timezone: 'UTC',
        kind: 'noop',
        nextRunAt: '2026-06-01T10:00:00.000Z',
        lastRunAt: '2026-06-01T09:00:00.000Z',
      },
    ]);
  });

  it("'Last enqueued' is the last slot a job was enqueued for: never, for a schedule whose first evaluation came after its slot", async () => {
    // `0 3 * * *` deployed at 03:17: its first evaluation owes nothing (03:00 was before it existed).
    const nightly = defineSchedule({ name: 'nightly', cron: '0 3 * * *', kind: 'noop', payload: {} });
    await evaluateSchedules(t.db, registry, [nightly], { now: at('2026-06-01T03:17:00Z') });
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`)).toEqual([{ n: 0 }]);
    expect((await describeSchedules(t.db, [nightly], at('2026-06-01T03:18:00Z')))[0]).toMatchObject({
      lastRunAt: null,
      nextRunAt: '2026-06-02T03:00:00.000Z',
    });
    // Evaluated again the same day: still nothing enqueued, still never.
    await evaluateSchedules(t.db, registry, [nightly], { now: at('2026-06-01T12:00:00Z') });
    expect((await describeSchedules(t.db, [nightly], at('2026-06-01T12:00:00Z')))[0]!.lastRunAt).toBeNull();
    // The next night's slot is enqueued: that is the last enqueued.
    await evaluateSchedules(t.db, registry, [nightly], { now: at('2026-06-02T03:00:05Z') });
    expect((await describeSchedules(t.db, [nightly], at('2026-06-02T03:01:00Z')))[0]!.lastRunAt).toBe(
      '2026-06-02T03:00:00.000Z',
    );
    // Days of downtime: the missed slots are skipped, only the latest is enqueued, and that one is the last enqueued.
    await evaluateSchedules(t.db, registry, [nightly], { now: at('2026-06-05T12:00:00Z') });
    expect((await describeSchedules(t.db, [nightly], at('2026-06-05T12:00:00Z')))[0]!.lastRunAt).toBe(
      '2026-06-05T03:00:00.000Z',
    );
  });

  it('refuses a bad cron expression, an unknown time zone, an unknown kind, a payload the kind rejects, and a name used twice', () => {
    expect(() => defineSchedule({ name: 'x', cron: 'every day', kind: 'noop', payload: {} })).toThrow(
      /schedule x: .*five, six, or seven/,
    );
    expect(() =>
      defineSchedule({ name: 'x', cron: '* * * * *', timezone: 'Mars/Olympus', kind: 'noop', payload: {} }),
    ).toThrow(/schedule x: unknown time zone "Mars\/Olympus"/);
    expect(() => defineSchedule({ name: 'has space', cron: '* * * * *', kind: 'noop', payload: {} })).toThrow(
      /schedule name/,
    );
    const ok = defineSchedule({ name: 'x', cron: '* * * * *', kind: 'noop', payload: {} });
    expect(() => checkSchedules(registry, [defineSchedule({ ...ok, kind: 'fax' })])).toThrow(
      /schedule x: unknown job kind "fax"/,
    );
    expect(() =>
      checkSchedules(registry, [defineSchedule({ ...ok, kind: 'report', payload: { scope: 'weekly' } })]),
    ).toThrow(/schedule x: payload rejected by kind report/);
    expect(() => checkSchedules(registry, [ok, ok])).toThrow(/defined twice/);
  });

  it('the sidecar evaluates its schedules at each slot and runs the jobs', async () => {
    const ticks: string[] = [];
    const tick = defineJob({
      kind: 'tick',
      schema: z.object({}),
      handler: (_, { job }) => void ticks.push(job.runAt.toISOString()),
    });
    const sidecar = await startSidecar({
      databaseUrl: t.url,
      port: 0,
      apiToken: 'schedule-test-token-123',
      jobs: [tick],
      logger: silentLogger(),
      schedules: [defineSchedule({ name: 'every-second', cron: '* * * * * *', kind: 'tick', payload: {} })],
    });
    try {
      await until(
        async () => ticks.length,
        (n) => n >= 3,
        10_000,
        'three ticks',
      );
      const res = await fetch(`${sidecar.url}/schedules`, {
        headers: { authorization: 'Bearer schedule-test-token-123' },
      });
      const body = (await res.json()) as { schedules: { name: string; lastRunAt: string | null; nextRunAt: string }[] };
      expect(body.schedules).toEqual([
        {
          name: 'every-second',
          cron: '* * * * * *',
          timezone: 'UTC',
          kind: 'tick',
          nextRunAt: expect.any(String),
          lastRunAt: expect.any(String),
        },
      ]);
    } finally {
      await sidecar.stop();
    }
    // One job per slot: whole seconds, no second twice.
    expect(new Set(ticks).size).toBe(ticks.length);
    for (const runAt of ticks) expect(runAt).toMatch(/:\d\d\.000Z$/);
  });
});

function silentLogger() {
  const noop = () => {};
  const logger = {
    level: 'silent',
    info: noop,
    warn: noop,
    error: noop,
    debug: noop,
    fatal: noop,
    trace: noop,
    child: () => logger,
  };
  return logger as unknown as NonNullable<Parameters<typeof startSidecar>[0]>['logger'];
}
