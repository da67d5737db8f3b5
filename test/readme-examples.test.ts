// The README's examples, run as written.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { drain } from '../src/drain/index.ts';
import { JobRegistry, getJob } from '../src/entry/index.ts';
import { placeOrder } from '../examples/enqueue-in-transaction.ts';
import { createInvoice, emailInvoice, emailed, invoiceOrder } from '../examples/job-life.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  await t.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
  await t.query('CREATE TABLE invoices (id serial PRIMARY KEY, order_id int NOT NULL UNIQUE)');
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
    // A handler returns just before its completion is written: give that a moment.
    const left = async () => (await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'send_receipt'`))[0]!.n as number;
    for (let i = 0; i < 100 && (await left()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await left()).toBe(0);
  } finally {
    await sidecar.stop();
  }
});

it("a job's life: the invoice is written in its job's transaction, and the email that waited for it reads its result", async () => {
  const { invoiceJob, emailJob } = await invoiceOrder(t.db, 7);
  expect((await getJob(t.db, emailJob))!.status).toBe('waiting');
  const registry = new JobRegistry([createInvoice, emailInvoice]);
  expect(await drain(t.db, registry, { workerId: 'readme' })).toMatchObject({ completed: 2, failed: 0 });
  const [invoice] = await t.query<{ id: number }>('SELECT id FROM invoices WHERE order_id = 7');
  expect(await getJob(t.db, invoiceJob)).toMatchObject({ status: 'completed', result: { invoiceId: invoice!.id }, progress: { step: 'invoice written' } });
  expect(emailed).toEqual([{ orderId: 7, invoiceId: invoice!.id }]);
  expect(await getJob(t.db, emailJob)).toBeNull(); // its kind keeps nothing
});
