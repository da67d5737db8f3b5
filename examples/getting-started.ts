// docs/getting-started.md: the kinds its steps add to the quick start's jobs.ts — a job that fails
// once and is retried, one that fails every time and ends dead, and a workflow of three steps.
import { z } from 'zod';
// In your app: import { defineJob, defineWorkflow } from 'pgdrain';
import { defineJob, defineWorkflow } from '../src/entry/index.ts';

/** A stand-in for a payment service that times out the first time it is asked about an order. */
const asked = new Set<number>();
const payments = {
  charge: async (orderId: number) => {
    if (!asked.has(orderId)) {
      asked.add(orderId);
      throw new Error(`the payment service timed out for order ${orderId}`);
    }
    return { chargeId: `ch_${orderId}` };
  },
};

export const chargeCard = defineJob({
  kind: 'charge_card',
  schema: z.object({ orderId: z.number().int() }),
  maxAttempts: 3,
  backoff: { baseSeconds: 1 }, // the next attempt 0.5-1 s later, then 1-2 s
  keepCompletedSeconds: 3600, // kept an hour once completed, with its result and attempts
  handler: async ({ orderId }, ctx) => {
    console.log(`charging order ${orderId}, attempt ${ctx.job.attempts}`);
    return payments.charge(orderId);
  },
});

export const importFeed = defineJob({
  kind: 'import_feed',
  schema: z.object({ url: z.string().url() }),
  maxAttempts: 2,
  backoff: { baseSeconds: 1 },
  handler: async ({ url }) => {
    throw new Error(`GET ${url} answered 404`); // every attempt fails: it ends dead
  },
});

export const onboarding = defineWorkflow({
  kind: 'onboarding',
  schema: z.object({ userId: z.number().int() }),
  keepCompletedSeconds: 3600,
  run: async ({ userId }, step) => {
    const account = await step.run('create-account', async () => {
      console.log(`account created for user ${userId}`); // once, even if the run replays
      return { accountId: `acct-${userId}` };
    });
    await step.sleep('a-moment', 2); // seconds; the run holds no connection and no slot meanwhile
    await step.run('welcome-email', async () => {
      console.log(`welcome email sent to user ${userId}`);
    });
    return account;
  },
});
