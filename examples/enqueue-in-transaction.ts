// README example: the job commits with the order it describes, or not at all.
import { sql } from 'drizzle-orm';
// In your app: import { enqueue, type Db } from 'pgdrain';
import { enqueue, type Db } from '../src/entry/index.ts';

export async function placeOrder(db: Db, item: string): Promise<{ orderId: number; jobId: string }> {
  return db.transaction(async (tx) => {
    const result = await tx.execute(sql`INSERT INTO orders (item) VALUES (${item}) RETURNING id`);
    const orderId = Number((result as unknown as { rows: { id: number }[] }).rows[0]!.id);
    if (item === '') throw new Error('an order needs an item'); // rolls back the order and the job
    const job = await enqueue(tx, { kind: 'send_receipt', payload: { orderId } });
    return { orderId, jobId: job.id };
  });
}
