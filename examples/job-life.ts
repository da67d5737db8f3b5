// README example (A job's life): a transactional kind whose write and completion commit together,
// a kind that runs after it and reads what it returned, both enqueued in one transaction.
import { sql } from 'drizzle-orm';
import { z } from 'zod';
// In your app: import { defineJob, enqueue, type Db } from 'pgdrain';
import { defineJob, enqueue, type Db } from '../src/entry/index.ts';

export const createInvoice = defineJob({
  kind: 'create_invoice',
  schema: z.object({ orderId: z.number().int() }),
  transactional: true, // ctx.tx: the invoice row and the job's completion commit together, or neither does
  keepCompletedSeconds: 86_400, // kept a day with what it returns (GET /jobs/:id, waitFor, ctx.dependencies())
  handler: async ({ orderId }, ctx) => {
    const inserted = await ctx.tx.execute(sql`INSERT INTO invoices (order_id) VALUES (${orderId}) RETURNING id`);
    ctx.progress({ step: 'invoice written' });
    return { invoiceId: Number((inserted as unknown as { rows: { id: number }[] }).rows[0]!.id) };
  },
});

export const emailed: { orderId: number; invoiceId: number }[] = [];

export const emailInvoice = defineJob({
  kind: 'email_invoice',
  schema: z.object({ orderId: z.number().int() }),
  handler: async ({ orderId }, ctx) => {
    const [invoice] = await ctx.dependencies(); // the jobs it waited for, with their kept results
    const { invoiceId } = invoice!.result as { invoiceId: number };
    emailed.push({ orderId, invoiceId }); // your mailer here, passing ctx.signal along
  },
});

/** Both jobs in your transaction: the email waits until the invoice job has completed. */
export function invoiceOrder(db: Db, orderId: number): Promise<{ invoiceJob: string; emailJob: string }> {
  return db.transaction(async (tx) => {
    const invoice = await enqueue(tx, createInvoice, { orderId });
    const email = await enqueue(tx, emailInvoice, { orderId }, { after: [invoice.id], timeoutMs: 15_000 });
    return { invoiceJob: invoice.id, emailJob: email.id };
  });
}
