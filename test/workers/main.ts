// The tests' main Worker (test/workers/wrangler.toml): the deployed entry as SELF, and queues'
// clocks with the clock tests' own job kinds and databases, bound as TEST_CLOCK (no schedules,
// CLOCK_DATABASE_URL) and TEST_SCHEDULE_CLOCK (a schedule every 10 s, SCHEDULE_CLOCK_DATABASE_URL).
import queue from '../../src/worker/index.ts';
import type { DurableObjectState } from '../../src/worker/clock.ts';
import { clockQueue, scheduleQueue } from './clock-kinds.ts';

export default queue;

/** Each clock's alarm looks at its own database, and is the Worker's PGDRAIN_CLOCK to itself. */
const clockEnv = (env: Record<string, unknown>, database: string, binding: string) => ({
  ...env,
  DATABASE_URL: env[database],
  PGDRAIN_CLOCK: env[binding],
  DRAIN_BUDGET_MS: '10000',
  BACKSTOP_POLL_SECONDS: '3600',
});

export class TestClock extends clockQueue.QueueClock {
  constructor(ctx: DurableObjectState, env: Record<string, unknown>) {
    super(ctx, clockEnv(env, 'CLOCK_DATABASE_URL', 'TEST_CLOCK'));
  }
}

export class TestScheduleClock extends scheduleQueue.QueueClock {
  constructor(ctx: DurableObjectState, env: Record<string, unknown>) {
    super(ctx, clockEnv(env, 'SCHEDULE_CLOCK_DATABASE_URL', 'TEST_SCHEDULE_CLOCK'));
  }
}
