// Job kinds page: a kind's settings (compiled with the project; loaded by test/readme-examples.test.ts).
import { z } from 'zod';
// In your app: import { defineJob, PermanentJobError } from 'pgdrain';
import { defineJob, PermanentJobError } from '../src/entry/index.ts';

export const sendReceipt = defineJob({
  kind: 'send_receipt',
  schema: z.object({ orderId: z.number().int() }),
  maxAttempts: 5,                 // default 3
  timeoutMs: 10_000,              // default 30 s; the handler's AbortSignal fires then
  visibilityTimeoutSeconds: 120,  // default: the drainer's (VISIBILITY_TIMEOUT_SECONDS)
  // keepCompletedSeconds, transactional, ctx.progress(), ctx.dependencies(): see A job's life
  handler: async ({ orderId }, { signal, job }) => {
    // Must be idempotent. Throw to retry with backoff; throw PermanentJobError to go straight to dead.
    if (orderId < 0) throw new PermanentJobError(`job ${job.id}: no such order`);
    signal.throwIfAborted();
  },
});
