// The clock tests' queue: kinds that write when they ran (public.clock_runs), one that fails once,
// and one that never returns (to be killed); bound to the clock database in main.ts.
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { defineJob } from '../../src/jobs/index.ts';
import { createWorker } from '../../src/worker/create-worker.ts';
import { defineSchedule } from '../../src/schedules.ts';
import { type StepContext, defineWorkflow } from '../../src/workflows/index.ts';

/** Each run, with when it started, in the clock database. */
const recordRun = defineJob({
  kind: 'clock-run',
  schema: z.object({ tag: z.string() }),
  transactional: true,
  handler: async ({ tag }, { tx, job }) => {
    await tx.execute(
      sql`INSERT INTO public.clock_runs (tag, job_id, attempt, run_at) VALUES (${tag}, ${job.id}::bigint, ${job.attempts}, ${job.runAt.toISOString()}::timestamptz)`,
    );
  },
});

/** Fails its first attempt, a second's backoff, then records. */
const failOnce = defineJob({
  kind: 'clock-fail-once',
  schema: z.object({ tag: z.string() }),
  maxAttempts: 3,
  backoff: { baseSeconds: 1, capSeconds: 2 },
  transactional: true,
  handler: async ({ tag }, { tx, job }) => {
    if (job.attempts === 1) throw new Error('first attempt fails');
    await tx.execute(
      sql`INSERT INTO public.clock_runs (tag, job_id, attempt, run_at) VALUES (${tag}, ${job.id}::bigint, ${job.attempts}, ${job.runAt.toISOString()}::timestamptz)`,
    );
  },
});

/** A workflow: records its start, sleeps 1.5 s, records its wake, waits for `clock.go` (key
 * `flow:<tag>`), records its end. */
const sleepingFlow = defineWorkflow({
  kind: 'clock-flow',
  schema: z.object({ tag: z.string() }),
  run: async ({ tag }, step, { job }) => {
    const record =
      (what: string) =>
      async ({ tx }: StepContext) => {
        await tx.execute(
          sql`INSERT INTO public.clock_runs (tag, job_id, attempt, run_at) VALUES (${`${tag}-${what}`}, ${job.id}::bigint, ${job.attempts}, now())`,
        );
      };
    await step.run('start', record('start'), { transactional: true });
    await step.sleep('nap', 1.5);
    await step.run('woke', record('woke'), { transactional: true });
    const go = await step.waitForEvent<{ n: number }>('go', { event: 'clock.go', key: `flow:${tag}` });
    await step.run('done', record(`done-${go?.n}`), { transactional: true });
  },
});

export const CLOCK_KINDS = [recordRun, failOnce, sleepingFlow];

/** The queue most clock tests drive: no schedules, so an idle queue is idle. */
export const clockQueue = createWorker({ jobs: CLOCK_KINDS });

/** A queue with a schedule every 10 seconds (seconds first), on a database of its own. */
export const scheduleQueue = createWorker({
  jobs: CLOCK_KINDS,
  schedules: [
    defineSchedule({
      name: 'clock-every-10s',
      cron: '*/10 * * * * *',
      kind: 'clock-run',
      payload: { tag: 'schedule' },
    }),
  ],
});
