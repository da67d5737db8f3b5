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
  expect(await t.query('SELECT kind, payload FROM pgdrain.jobs WHERE id = $1', [jobId])).toEqual([
    { kind: 'send_receipt', payload: { orderId } },
  ]);
  await expect(placeOrder(t.db, '')).rejects.toThrow('an order needs an item');
  expect(await t.query('SELECT count(*)::int AS n FROM orders')).toEqual([{ n: 1 }]);
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 1 }]);
});

it('the sidecar as a library runs a kind of your own, enqueued over its HTTP API', async () => {
  const { startMySidecar, sent } = await import('../examples/custom-sidecar.ts');
  const sidecar = await startMySidecar(t.url);
  try {
    const res = await fetch(`${sidecar.url}/jobs`, {
      method: 'POST',
      headers: { authorization: 'Bearer change-me-to-a-long-secret', 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'send_receipt', payload: { orderId: 42 } }),
    });
    expect(res.status).toBe(201);
    // It also runs the receipt job that placeOrder committed in the first example.
    for (let i = 0; i < 100 && sent.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
    expect([...sent].sort((a, b) => a - b)).toEqual([1, 42]);
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'send_receipt'`)).toEqual([{ n: 0 }]);
  } finally {
    await sidecar.stop();
  }
});
