// pgdrain/testing's testWorkflow against a real PostgreSQL: the virtual clock (sleeps, timeouts and
// a step's backoff skip ahead, later moments keep their distance), events sent as the run waits,
// stubs, a wait nothing answers, and a child whose kind was not given; a test's runs are its own
// (a `pgdrain start` on the same database, a second test at once), and a misspelt stub or event fails.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { defineJob } from '../src/jobs/registry.ts';
import { testWorkflow } from '../src/entry/testing.ts';
import { defineWorkflow } from '../src/workflows/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { startSidecarProcess } from './support/sidecar-process.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

it('sleeps of an hour and a day, a wait that times out and a step retried after its backoff end in well under a second', async () => {
  let tries = 0;
  const flow = defineWorkflow({
    kind: 'tw_clock',
    schema: z.object({}),
    keepCompletedSeconds: 60,
    run: async (_p, step) => {
      await Promise.all([step.sleep('hour', 3_600), step.sleep('day', 86_400)]);
      const answer = await step.waitForEvent('never', { event: 'tw.never', key: 'k', timeoutSeconds: 600 });
      const flaky = await step.run(
        'flaky',
        () => {
          tries++;
          if (tries === 1) throw new Error('first try fails');
          return 'second try';
        },
        { maxAttempts: 2, backoff: { baseSeconds: 300 } },
      );
      return { answer, flaky };
    },
  });
  const started = Date.now();
  const run = await testWorkflow(flow, {}, { db: t.db });
  expect(run).toMatchObject({ status: 'completed', result: { answer: null, flaky: 'second try' } });
  // A day (the hour's end first, then the day's 23 hours after it), 10 minutes, 150–300 s of backoff.
  expect(run.skippedMs).toBeGreaterThan(86_400_000 + 600_000 + 100_000);
  expect(run.skippedMs).toBeLessThan(86_400_000 + 600_000 + 320_000);
  expect(Date.now() - started).toBeLessThan(20_000);
  expect(run.steps.find((s) => s.name === 'flaky')).toMatchObject({ status: 'completed', attempts: 2 });
});

it('a wait for an event the test did not give ends the run there, waiting; a child whose kind was not given is named', async () => {
  const waits = defineWorkflow({
    kind: 'tw_waits',
    schema: z.object({}),
    run: async (_p, step) => step.waitForEvent('approval', { event: 'tw.approved', key: 'order:1' }),
  });
  const waiting = await testWorkflow(waits, {}, { db: t.db });
  expect(waiting).toMatchObject({ status: 'waiting', result: null });
  expect(waiting.steps).toMatchObject([{ name: 'approval', status: 'waiting', event: 'tw.approved' }]);
  const answered = await testWorkflow(
    waits,
    {},
    {
      db: t.db,
      events: [{ event: 'tw.approved', key: 'order:1', payload: { by: 'ana' } }],
    },
  );
  expect(answered.steps).toMatchObject([{ name: 'approval', status: 'completed', result: { by: 'ana' } }]);
  const child = defineJob({ kind: 'tw_child', schema: z.object({}), keepCompletedSeconds: 60, handler: () => 'real' });
  const parent = defineWorkflow({
    kind: 'tw_parent',
    schema: z.object({}),
    keepCompletedSeconds: 60,
    run: async (_p, step) => step.invoke('kid', child, {}),
  });
  await expect(testWorkflow(parent, {}, { db: t.db })).rejects.toThrow(
    /waits for job \d+ \(step kid\) of kind tw_child; pass its kind in jobs, or stub the step/,
  );
  expect(await testWorkflow(parent, {}, { db: t.db, jobs: [child] })).toMatchObject({ result: 'real' });
  expect(await testWorkflow(parent, {}, { db: t.db, steps: { kid: 'stubbed' } })).toMatchObject({ result: 'stubbed' });
});

it('a stub or an event that no step of the run names fails the test, naming it and what the run has', async () => {
  const flow = defineWorkflow({
    kind: 'tw_names',
    schema: z.object({}),
    keepCompletedSeconds: 60,
    run: async (_p, step) => {
      const paid = await step.run('charge', () => 'real charge');
      const ok = await step.waitForEvent('approval', { event: 'tw.ok', key: 'k', timeoutSeconds: 60 });
      return { paid, ok };
    },
  });
  await expect(testWorkflow(flow, {}, { db: t.db, steps: { chrage: 'stub' } })).rejects.toThrow(
    "testWorkflow: steps stubs 'chrage', which no step of the tw_names run has; its steps: charge, approval",
  );
  await expect(
    testWorkflow(flow, {}, { db: t.db, events: [{ event: 'tw.okay', key: 'k', payload: {} }] }),
  ).rejects.toThrow(
    'testWorkflow: events gives tw.okay (key k), which no step of the tw_names run waits for; its waits: tw.ok (key k)',
  );
  expect(
    await testWorkflow(flow, {}, { db: t.db, steps: { charge: 'stub' }, events: [{ event: 'tw.ok', key: 'k' }] }),
  ).toMatchObject({ status: 'completed', result: { paid: 'stub', ok: {} } });
});

it('two tests of one workflow at once each run their own run with their own stubs', async () => {
  const flow = defineWorkflow({
    kind: 'tw_twice',
    schema: z.object({ who: z.string() }),
    keepCompletedSeconds: 60,
    run: async ({ who }, step) => {
      const first = await step.run('first', () => 'real');
      await step.sleep('pause', 60);
      return { who, first };
    },
  });
  for (let round = 0; round < 5; round++) {
    const [a, b] = await Promise.all([
      testWorkflow(flow, { who: 'a' }, { db: t.db, steps: { first: 'stub a' } }),
      testWorkflow(flow, { who: 'b' }, { db: t.db, steps: { first: 'stub b' } }),
    ]);
    expect(a.result).toEqual({ who: 'a', first: 'stub a' });
    expect(b.result).toEqual({ who: 'b', first: 'stub b' });
  }
});

it('a `pgdrain start` with the same kinds on the same database claims none of the test’s runs', async () => {
  await t.query(
    'CREATE TABLE IF NOT EXISTS public.workflow_effects (job_id bigint NOT NULL, step text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())',
  );
  const sidecar = await startSidecarProcess(
    { DATABASE_URL: t.url, API_TOKEN: 'testing-isolation-token-0123456789', POLL_INTERVAL_MS: '50' },
    fileURLToPath(new URL('./fixtures/workflows/sidecar.ts', import.meta.url)),
  );
  try {
    // The sidecar's wf_restartable writes a 'reserve' effect and dies at 'charge'; the test's own code
    // for the kind returns at once. Whoever claims a run is seen in its result and its effects.
    const mine = defineWorkflow({
      kind: 'wf_restartable',
      schema: z.object({}),
      maxAttempts: 1,
      keepCompletedSeconds: 600,
      run: async (_p, step) => step.run('reserve', () => 'the test ran it'),
    });
    for (let round = 0; round < 10; round++) {
      const run = await testWorkflow(mine, {}, { db: t.db });
      expect(run).toMatchObject({ status: 'completed', result: 'the test ran it' });
      expect(await t.query('SELECT step FROM public.workflow_effects WHERE job_id = $1', [run.id])).toEqual([]);
    }
  } finally {
    sidecar.kill();
    await sidecar.exited;
  }
}, 60_000);
