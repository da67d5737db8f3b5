// docs/workflows.md (Steps side by side): two children invoked at once with Promise.all, parked on
// together and run side by side; and a race between a deadline and an event.
import { z } from 'zod';
// In your app: import { defineJob, defineWorkflow } from 'pgdrain';
import { defineJob, defineWorkflow } from '../src/entry/index.ts';

export const fetchProfile = defineJob({
  kind: 'fetch-profile', schema: z.object({ userId: z.number() }), keepCompletedSeconds: 3_600,
  handler: async ({ userId }) => ({ name: `user ${userId}` }),
});
export const fetchInvoices = defineJob({
  kind: 'fetch-invoices', schema: z.object({ userId: z.number() }), keepCompletedSeconds: 3_600,
  handler: async ({ userId }) => [{ userId, total: 12 }],
});

export const accountSummary = defineWorkflow({
  kind: 'account-summary',
  schema: z.object({ userId: z.number().int() }),
  keepCompletedSeconds: 3_600,
  run: async ({ userId }, step) => {
    const [profile, invoices] = await Promise.all([
      step.invoke('profile', fetchProfile, { userId }),
      step.invoke('invoices', fetchInvoices, { userId }),
    ]);
    const answered = await Promise.race([
      step.sleep('deadline', 60).then(() => false),
      step.waitForEvent('approved', { event: 'summary.approved', key: `user:${userId}` }).then(() => true),
    ]);
    return { profile, invoices, answered };
  },
});
