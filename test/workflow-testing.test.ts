// pgdrain/testing's testWorkflow against a real PostgreSQL: the virtual clock (sleeps, timeouts and
// a step's backoff skip ahead, later moments keep their distance), events sent as the run waits,
// stubs, a wait nothing answers, and a child whose kind was not given.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { defineJob } from '../src/jobs/registry.ts';
import { testWorkflow } from '../src/entry/testing.ts';
import { defineWorkflow } from '../src/workflows/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

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
