// A kind, enqueued in your own transaction through a Drizzle table (run by test/readme-examples.test.ts;
// the README's quick starts run as written in test/package.test.ts). The Worker examples register it.
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { z } from 'zod';
// In your app: import { defineJob, enqueue, type Db } from 'pgdrain';
import { type Db, defineJob, enqueue } from '../src/entry/index.ts';

export const orders = pgTable('orders', { id: serial('id').primaryKey(), item: text('item').notNull() });

export const sendReceipt = defineJob({
  kind: 'send_receipt',
  schema: z.object({ orderId: z.number().int() }),
  handler: async ({ orderId }) => { /* idempotent: it may run again after a crash */ },
});

export async function quickStart(db: Db, item: string): Promise<void> {
  await db.transaction(async (tx) => {
    const [order] = await tx.insert(orders).values({ item }).returning({ id: orders.id });
    await enqueue(tx, sendReceipt, { orderId: order!.id });   // commits with the order, or not at all
  });
}
