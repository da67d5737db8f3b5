// docs/workflows.md (per-step tries; restart from a step): a step with tries of its own and a bound
// on each, and a finished run started again from a named step once the bug is fixed.
import { z } from 'zod';
// In your app: import { defineWorkflow, retry, type Db } from 'pgdrain';
import { defineWorkflow, retry, type Db } from '../src/entry/index.ts';

/** Stands in for a payment service that fails now and then. */
export const payments = { failuresLeft: 2, charges: 0 };

export const checkout = defineWorkflow({
  kind: 'checkout',
  schema: z.object({ orderId: z.number().int() }),
  maxAttempts: 1,                                                  // the run's own attempts
  keepCompletedSeconds: 3_600,
  run: async ({ orderId }, step) => {
    const charged = await step.run('charge', async ({ signal, attempt }) => {
      if (payments.failuresLeft-- > 0) throw new Error(`payment service busy (try ${attempt})`);
      payments.charges++;
      return { orderId, chargedAt: attempt, aborted: signal.aborted };
    }, { maxAttempts: 5, backoff: { baseSeconds: 0.05 }, timeoutMs: 10_000 }); // tries of its own
    const shipped = await step.run('ship', () => ({ orderId, carrier: 'post' }));
    return { charged, shipped };
  },
});

/** After a fix: the run again from 'ship', its charge kept. */
export const reship = (db: Db, id: string) => retry(db, id, { fromStep: 'ship' });
