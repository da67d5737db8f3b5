// Flow control page: priorities, a schedule, limits across drainers (run by test/readme-examples.test.ts).
import { z } from 'zod';
// In your app: import { defineBatchJob, defineJob, defineSchedule, enqueue, removeGroupLimits, setGroupLimits, type Db } from 'pgdrain';
import { type Db, defineBatchJob, defineJob, defineSchedule, enqueue, removeGroupLimits, setGroupLimits } from '../src/entry/index.ts';

const schema = z.record(z.string(), z.unknown());
const handler = async () => {};

export const sendInvoice = defineJob({ kind: 'send_invoice', schema, priority: 10, handler });  // the kind's default
export async function urgentInvoice(tx: Db, orderId: number) {
  await enqueue(tx, sendInvoice, { orderId }, { priority: 100 });                                 // this one first
}

export const nightlyReport = defineSchedule({
  name: 'nightly-report',          // the key of its state row
  cron: '30 2 * * *',              // 5 fields, or 6 with seconds first (croner)
  timezone: 'Europe/Berlin',       // IANA; default UTC. DST: a missing 02:30 runs at 03:00, a repeated one once
  kind: 'report',
  payload: { scope: 'daily' },     // checked against the kind's schema when the drainer starts
  backfillSeconds: 3600,           // after downtime, enqueue missed slots of the last hour; default 0: only the latest
});
export const report = defineJob({ kind: 'report', schema, handler });

export const charge = defineJob({
  kind: 'charge_card',
  schema,
  globalConcurrency: 5,                               // at most 5 running at once, anywhere
  rateLimit: { limit: 100, periodSeconds: 60 },       // at most 100 starts in any rolling minute
  handler,
});
export const syncLedger = defineJob({
  kind: 'sync_ledger',
  schema,
  groupConcurrency: 1,                                // one at a time per key: per-customer FIFO
  rateLimit: { limit: 2, periodSeconds: 1, perGroup: true }, // and at most 2 a second per key
  handler,
});
export async function ledgerEntry(tx: Db, customerId: number, entry: string) {
  await enqueue(tx, syncLedger, { entry }, { groupKey: `customer-${customerId}` });
}

/** A tenant's own limits, from your data: 10 of its ledger jobs at once and 20 a second. */
export async function upgradeCustomer(db: Db, customerId: number) {
  await setGroupLimits(db, { kind: 'sync_ledger', groupKey: `customer-${customerId}`, concurrency: 10, rateLimit: { limit: 20, periodSeconds: 1 } });
}
export async function downgradeCustomer(db: Db, customerId: number) {
  await removeGroupLimits(db, { kind: 'sync_ledger', groupKey: `customer-${customerId}` });   // back to the kind's
}

/** Stands in for a provider's bulk API: one request for many messages. */
export const mailbox = { requests: 0, async sendMany(to: string[]) { this.requests++; return to.map((address) => (address.endsWith('.invalid') ? null : `msg-${address}`)); } };

export const sendEmails = defineBatchJob({
  kind: 'send_email',
  schema: z.object({ to: z.string() }),
  size: 100,                                          // up to 100 jobs per call
  waitMs: 200,                                        // fewer ready: wait up to 200 ms for a fuller batch
  handler: async (items) => {
    const ids = await mailbox.sendMany(items.map((item) => item.payload.to));
    return ids.map((messageId) => (messageId ? { messageId } : new Error('bounced')));  // one outcome per job
  },
});
