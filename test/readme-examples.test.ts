// The README's examples, run as written.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { placeOrder } from '../examples/enqueue-in-transaction.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  await t.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
});
afterAll(() => t?.close());

it('enqueue inside your own transaction: the order and its job commit together, or neither does', async () => {
  const { orderId, jobId } = await placeOrder(t.db, 'book');
  expect(await t.query('SELECT kind, payload FROM jobs WHERE id = $1', [jobId])).toEqual([
    { kind: 'send_receipt', payload: { orderId } },
  ]);
  await expect(placeOrder(t.db, '')).rejects.toThrow('an order needs an item');
  expect(await t.query('SELECT count(*)::int AS n FROM orders')).toEqual([{ n: 1 }]);
  expect(await t.query('SELECT count(*)::int AS n FROM jobs')).toEqual([{ n: 1 }]);
});
