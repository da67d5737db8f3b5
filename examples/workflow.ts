// README example (Durable workflows): an onboarding run of five steps — a call made once, a row
// written exactly once, a day's sleep, a wait for the address to be verified (an event sent in the
// transaction that verifies it), and a child job whose result the run returns.
import { eq } from 'drizzle-orm';
import { boolean, integer, pgTable } from 'drizzle-orm/pg-core';
import { z } from 'zod';
// In your app: import { defineJob, defineWorkflow, enqueue, sendEvent, type Db } from 'pgdrain';
import { defineJob, defineWorkflow, enqueue, sendEvent, type Db } from '../src/entry/index.ts';

export const users = pgTable('users', { id: integer('id').primaryKey(), verified: boolean('verified').notNull().default(false) });
export const welcome = pgTable('welcome', { userId: integer('user_id').primaryKey() });
/** Stand-ins for your services. */
export const calls: string[] = [];
const api = { createAccount: async (userId: number) => (calls.push(`account ${userId}`), { accountId: `acct-${userId}` }) };
const mail = { receipt: async (userId: number) => (calls.push(`receipt ${userId}`), `rcpt-${userId}`) };

export const sendReceipt = defineJob({
  kind: 'send-receipt', schema: z.object({ userId: z.number() }),
  keepCompletedSeconds: 86_400,                      // step.invoke reads a child's result: its kind keeps it
  handler: async ({ userId }) => ({ receiptId: await mail.receipt(userId) }),
});

export const onboarding = defineWorkflow({
  kind: 'onboarding',
  schema: z.object({ userId: z.number().int() }),
  keepCompletedSeconds: 86_400,
  run: async ({ userId }, step) => {
    const account = await step.run('create-account', () => api.createAccount(userId)); // once; result stored
    await step.run('welcome-row', async ({ tx }) => {                                   // exactly once in PostgreSQL:
      await tx.insert(welcome).values({ userId });                                      // the write and the step's
    }, { transactional: true });                                                        // record commit together
    await step.sleep('a-day', 86_400);                                                  // seconds
    const verified = await step.waitForEvent('verified', {                              // the event's payload,
      event: 'email.verified', key: `user:${userId}`, timeoutSeconds: 3 * 86_400 });    // or null at the timeout
    const receipt = await step.invoke('receipt', sendReceipt, { userId });              // a child job; its result
    return { account, verified: verified !== null, receipt };
  },
});

/** Register both kinds (createWorker / startSidecar / `--jobs`), then enqueue like any job. */
export const startOnboarding = (db: Db, userId: number) => enqueue(db, onboarding, { userId });

/** The event commits with the row that makes it true: a rollback sends nothing. */
export function verifyEmail(db: Db, userId: number, at: Date) {
  return db.transaction(async (tx) => {
    await tx.update(users).set({ verified: true }).where(eq(users.id, userId));
    await sendEvent(tx, { event: 'email.verified', key: `user:${userId}`, payload: { at } });
  });
}
