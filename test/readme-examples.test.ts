// The documentation's examples (README.md and docs/: each block names its file), run as written.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { drain } from '../src/drain/index.ts';
import { JobRegistry, getJob } from '../src/entry/index.ts';
import { placeOrder } from '../examples/enqueue-in-transaction.ts';
import { createInvoice, emailInvoice, emailed, invoiceOrder } from '../examples/job-life.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { resetQueue } from './support/harness.ts';

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
    const left = async () =>
      (await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'send_receipt'`))[0]!.n as number;
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
  expect(await getJob(t.db, invoiceJob)).toMatchObject({
    status: 'completed',
    result: { invoiceId: invoice!.id },
    progress: { step: 'invoice written' },
  });
  expect(emailed).toEqual([{ orderId: 7, invoiceId: invoice!.id }]);
  expect(await getJob(t.db, emailJob)).toBeNull(); // its kind keeps nothing
});

it('a kind and its enqueue with a Drizzle table: the order and its job commit together; the drainer runs it', async () => {
  const { quickStart, sendReceipt } = await import('../examples/quick-start.ts');
  await resetQueue(t);
  await quickStart(t.db, 'pen');
  expect(await t.query(`SELECT kind, payload->>'orderId' IS NOT NULL AS has_order FROM pgdrain.jobs`)).toEqual([
    { kind: 'send_receipt', has_order: true },
  ]);
  expect(await drain(t.db, new JobRegistry([sendReceipt]), { workerId: 'quick-start' })).toMatchObject({
    completed: 1,
  });
});

it("the Worker with the queue's clock exports the Durable Object class beside its handlers", async () => {
  const { default: worker, QueueClock } = await import('../examples/worker-clock.ts');
  expect(typeof worker.scheduled).toBe('function');
  expect(typeof QueueClock).toBe('function');
  expect(typeof QueueClock.prototype.alarm).toBe('function');
  expect(typeof QueueClock.prototype.fetch).toBe('function');
});

it("a kind's settings: retries, timeouts and its own visibility timeout are written to its jobs", async () => {
  const { sendReceipt } = await import('../examples/job-kind.ts');
  await resetQueue(t);
  const { enqueue } = await import('../src/entry/index.ts');
  const bad = await enqueue(t.db, sendReceipt, { orderId: -1 });
  expect(await t.query(`SELECT max_attempts, visibility_seconds FROM pgdrain.jobs WHERE id = $1`, [bad.id])).toEqual([
    { max_attempts: 5, visibility_seconds: 120 },
  ]);
  expect(await drain(t.db, new JobRegistry([sendReceipt]), { workerId: 'kinds' })).toMatchObject({ dead: 1 });
});

it('a kind with a runner of its own: each look that finds the export not ready snoozes the job, no attempt spent', async () => {
  const { awaitExport, exports } = await import('../examples/kind-runner.ts');
  await resetQueue(t);
  exports.set('e1', { looks: 5, url: 'https://files.example.com/e1.csv' });
  const { enqueue } = await import('../src/entry/index.ts');
  const { id } = await enqueue(t.db, awaitExport, { exportId: 'e1' });
  const registry = new JobRegistry([awaitExport]);
  const snoozes: number[] = [];
  for (let round = 0; round < 50 && (await getJob(t.db, id))?.status === 'pending'; round++) {
    const report = await drain(t.db, registry, { workerId: 'exports' });
    snoozes.push(report.snoozed);
    await new Promise((r) => setTimeout(r, 60));
  }
  // Four looks found it not ready, the fifth completed it: five claims, one attempt spent in all
  // (the completing one's), though the kind allows three.
  expect(snoozes.reduce((a, b) => a + b, 0)).toBe(4);
  expect(await getJob(t.db, id)).toMatchObject({
    status: 'completed',
    attempts: 1,
    result: { url: 'https://files.example.com/e1.csv' },
  });
});

it('flow control: a priority above the kind default, a key for per-customer order, a schedule the drainer accepts', async () => {
  const { urgentInvoice, ledgerEntry, sendInvoice, syncLedger, report, nightlyReport } = await import(
    '../examples/flow-control.ts'
  );
  const { checkSchedules } = await import('../src/schedules.ts');
  await resetQueue(t);
  await t.db.transaction(async (tx) => {
    await urgentInvoice(tx, 7);
    await ledgerEntry(tx, 42, 'credit 10');
  });
  expect(await t.query(`SELECT kind, priority, group_key FROM pgdrain.jobs ORDER BY id`)).toEqual([
    { kind: 'send_invoice', priority: 100, group_key: null },
    { kind: 'sync_ledger', priority: 0, group_key: 'customer-42' },
  ]);
  expect(() => checkSchedules(new JobRegistry([sendInvoice, syncLedger, report]), [nightlyReport])).not.toThrow();
  const { upgradeCustomer, downgradeCustomer } = await import('../examples/flow-control.ts');
  await upgradeCustomer(t.db, 42);
  expect(
    await t.query(`SELECT kind, group_key, concurrency, rate_limit, rate_period_seconds FROM pgdrain.group_limits`),
  ).toEqual([
    { kind: 'sync_ledger', group_key: 'customer-42', concurrency: 10, rate_limit: 20, rate_period_seconds: 1 },
  ]);
  await downgradeCustomer(t.db, 42);
  expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.group_limits`)).toEqual([{ n: 0 }]);

  // The batch kind: 150 emails in two calls (100, then the 50 left), the bounced one retried alone.
  const { sendEmails, mailbox } = await import('../examples/flow-control.ts');
  const { enqueueMany } = await import('../src/jobs/enqueue.ts');
  await enqueueMany(
    t.db,
    sendEmails,
    Array.from({ length: 150 }, (_, i) => ({ to: i === 9 ? 'nobody@example.invalid' : `user${i}@example.com` })),
  );
  const emailed = await drain(t.db, new JobRegistry([sendEmails]), { workerId: 'batch-example' });
  expect(emailed).toMatchObject({ claimed: 150, completed: 149, failed: 1 });
  expect(mailbox.requests).toBe(2);
  expect(await t.query(`SELECT payload->>'to' AS to, last_error FROM pgdrain.jobs WHERE kind = 'send_email'`)).toEqual([
    { to: 'nobody@example.invalid', last_error: 'bounced' },
  ]);
});

it('the typed client, against a sidecar', async () => {
  const { startMySidecar } = await import('../examples/custom-sidecar.ts');
  const { useTheClient } = await import('../examples/http-client.ts');
  const sidecar = await startMySidecar(t.url);
  process.env.PGDRAIN_URL = sidecar.url;
  process.env.PGDRAIN_TOKEN = 'change-me-to-a-long-secret';
  try {
    expect(await useTheClient()).toMatchObject({ status: 'pending' });
  } finally {
    await sidecar.stop();
  }
});

it("the workflow example: steps once, a sleep, an event sent in the verifying transaction, a child's result", async () => {
  const { onboarding, sendReceipt, startOnboarding, verifyEmail, calls } = await import('../examples/workflow.ts');
  const { drain } = await import('../src/drain/index.ts');
  const { JobRegistry } = await import('../src/jobs/registry.ts');
  await t.query('CREATE TABLE users (id int PRIMARY KEY, verified boolean NOT NULL DEFAULT false)');
  await t.query('CREATE TABLE welcome (user_id int PRIMARY KEY)');
  await t.query('INSERT INTO users (id) VALUES (42)');
  const registry = new JobRegistry([onboarding, sendReceipt]);
  const run = () => drain(t.db, registry, { workerId: 'example' });
  const { id } = await startOnboarding(t.db, 42);
  expect(await run()).toMatchObject({ snoozed: 1 });
  // Snoozed for a day: pending until the sleep's end.
  expect(await t.query('SELECT status FROM pgdrain.jobs WHERE id = $1', [id])).toEqual([{ status: 'pending' }]);
  // A day later (the test moves the sleep's end instead of waiting for it).
  await t.query(`UPDATE pgdrain.workflow_steps SET wake_at = now() WHERE job_id = $1 AND name = 'a-day'`, [id]);
  await t.query('UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1', [id]);
  expect(await run()).toMatchObject({ snoozed: 1 }); // now waiting for the event
  await verifyEmail(t.db, 42, new Date('2026-12-01T10:00:00Z'));
  await run();
  const [job] = await t.query('SELECT status, result FROM pgdrain.jobs_and_history WHERE id = $1', [id]);
  expect(job).toEqual({
    status: 'completed',
    result: { account: { accountId: 'acct-42' }, verified: true, receipt: { receiptId: 'rcpt-42' } },
  });
  expect(calls).toEqual(['account 42', 'receipt 42']);
  expect(await t.query('SELECT user_id FROM welcome')).toEqual([{ user_id: 42 }]);
});

it('the parallel steps example: two children at once, then a race an event wins', async () => {
  const { accountSummary, fetchInvoices, fetchProfile } = await import('../examples/parallel-steps.ts');
  const { drain } = await import('../src/drain/index.ts');
  const { JobRegistry } = await import('../src/jobs/registry.ts');
  const { enqueue, sendEvent } = await import('../src/entry/index.ts');
  const registry = new JobRegistry([accountSummary, fetchProfile, fetchInvoices]);
  const { id } = await enqueue(t.db, accountSummary, { userId: 7 });
  // The run parks on both children at once; this drain runs them and the run again, up to the race.
  await drain(t.db, registry, { workerId: 'example' });
  expect(
    await t.query(
      `SELECT count(DISTINCT created_at)::int AS n FROM pgdrain.jobs_and_history WHERE kind LIKE 'fetch-%'`,
    ),
  ).toEqual([{ n: 1 }]);
  expect(await t.query('SELECT status FROM pgdrain.jobs WHERE id = $1', [id])).toEqual([{ status: 'pending' }]);
  await sendEvent(t.db, { event: 'summary.approved', key: 'user:7' });
  await drain(t.db, registry, { workerId: 'example' });
  const [job] = await t.query('SELECT status, result FROM pgdrain.jobs_and_history WHERE id = $1', [id]);
  expect(job).toEqual({
    status: 'completed',
    result: { profile: { name: 'user 7' }, invoices: [{ userId: 7, total: 12 }], answered: true },
  });
});

it('the testing example: testWorkflow runs the onboarding to its end on a virtual clock, with a stub and an event', async () => {
  const { onboardingInATest } = await import('../examples/testing-a-workflow.ts');
  const { calls } = await import('../examples/workflow.ts');
  await t.query('CREATE TABLE IF NOT EXISTS welcome (user_id int PRIMARY KEY)');
  const before = calls.length;
  const started = Date.now();
  const run = await onboardingInATest(t.db, 77);
  expect(run).toMatchObject({
    status: 'completed',
    result: { account: { accountId: 'acct-test' }, verified: true, receipt: { receiptId: 'rcpt-77' } },
    lastError: null,
  });
  expect(run.steps.map((s) => [s.name, s.status])).toEqual([
    ['create-account', 'completed'],
    ['welcome-row', 'completed'],
    ['a-day', 'completed'],
    ['verified', 'completed'],
    ['receipt', 'completed'],
  ]);
  // The day's sleep was skipped (the virtual clock), and the stubbed call never ran.
  expect(run.skippedMs).toBeGreaterThan(86_000_000);
  expect(Date.now() - started).toBeLessThan(60_000);
  expect(calls.slice(before)).toEqual(['receipt 77']);
  expect(await t.query('SELECT user_id FROM welcome WHERE user_id = 77')).toEqual([{ user_id: 77 }]);
});

it("the step tries example: two failed tries of 'charge' spend none of the run's one attempt; a restart from 'ship' keeps the charge", async () => {
  const { checkout, payments, reship } = await import('../examples/step-tries.ts');
  const { drain } = await import('../src/drain/index.ts');
  const { JobRegistry } = await import('../src/jobs/registry.ts');
  const { enqueue } = await import('../src/entry/index.ts');
  const registry = new JobRegistry([checkout]);
  const { id } = await enqueue(t.db, checkout, { orderId: 5 });
  const status = async () =>
    (await t.query('SELECT status FROM pgdrain.jobs_and_history WHERE id = $1', [id]))[0]!.status;
  for (let round = 0; round < 20 && (await status()) !== 'completed'; round++) {
    await drain(t.db, registry, { workerId: 'example' });
    await new Promise((r) => setTimeout(r, 60));
  }
  const [done] = await t.query('SELECT status, attempts, result FROM pgdrain.jobs_and_history WHERE id = $1', [id]);
  expect(done).toEqual({
    status: 'completed',
    attempts: 1,
    result: { charged: { orderId: 5, chargedAt: 3, aborted: false }, shipped: { orderId: 5, carrier: 'post' } },
  });
  expect(await reship(t.db, id)).toMatchObject({ outcome: 'retried' });
  await drain(t.db, registry, { workerId: 'example' });
  expect(await status()).toBe('completed');
  expect(payments.charges).toBe(1);
});

it('the workflow-changes example: a run past the patch keeps the old path, a fresh one takes the new; a version runs beside the old', async () => {
  const { done, fulfil, fulfilPatched, fulfilV2 } = await import('../examples/workflow-changes.ts');
  const { drain } = await import('../src/drain/index.ts');
  const { JobRegistry } = await import('../src/jobs/registry.ts');
  const { enqueue, sendEvent } = await import('../src/entry/index.ts');
  const statusOf = async (id: string) =>
    (await t.query('SELECT status, held FROM pgdrain.jobs_and_history WHERE id = $1', [id]))[0];
  // The first deploy ships order 1 and parks it until delivery.
  const first = await enqueue(t.db, fulfil, { orderId: 1 });
  await drain(t.db, new JobRegistry([fulfil]), { workerId: 'example' });
  // The patched deploy, with version 2 beside it: order 2 starts on version 2, order 3 on the patched
  // version 1 (enqueued by its definition).
  const deployed = new JobRegistry([fulfilPatched, fulfilV2]);
  const second = await enqueue(t.db, fulfilV2, { orderId: 2 });
  const third = await enqueue(t.db, fulfilPatched, { orderId: 3 });
  await drain(t.db, deployed, { workerId: 'example' });
  for (const orderId of [1, 2, 3]) await sendEvent(t.db, { event: 'order.delivered', key: `order:${orderId}` });
  await drain(t.db, deployed, { workerId: 'example' });
  // All three completed (and, kept by no keepCompletedSeconds, are gone): none held, none dead.
  for (const { id } of [first, second, third]) expect(await statusOf(id)).toBeUndefined();
  // Runs go side by side: each order's steps in order.
  const of = (orderId: number) => done.filter((d) => d.endsWith(` ${orderId}`));
  expect(of(1)).toEqual(['reserve 1', 'ship 1']); // shipped before the patch: no check
  expect(of(2)).toEqual(['check and reserve 2', 'ship 2']); // version 2
  expect(of(3)).toEqual(['reserve 3', 'check 3', 'ship 3']); // reached the patch fresh
});

it('the events example: two subscribed kinds started by an event sent in TypeScript, then by a trigger on your own table', async () => {
  const { sendReceipt, updateLedger, orderPaid, PAID_TRIGGER, receipts, ledger } = await import(
    '../examples/events.ts'
  );
  const { drain } = await import('../src/drain/index.ts');
  const { JobRegistry } = await import('../src/jobs/registry.ts');
  const { subscribe } = await import('../src/jobs/subscriptions.ts');
  const registry = new JobRegistry([sendReceipt, updateLedger]);
  await subscribe(t.db, registry); // a drainer does this at start
  await orderPaid(t.db, 1, 10);
  await drain(t.db, registry, { workerId: 'example' });
  expect({ receipts, ledger }).toEqual({ receipts: [1], ledger: [1] });
  // Your own orders table (in a schema of its own here: an earlier example has one in public).
  const client = await t.pool.connect();
  try {
    await client.query('CREATE SCHEMA shop; SET search_path = shop, public');
    await client.query(
      'CREATE TABLE orders (id int PRIMARY KEY, total numeric NOT NULL, paid boolean NOT NULL DEFAULT false)',
    );
    await client.query(PAID_TRIGGER);
    await client.query('INSERT INTO orders (id, total) VALUES (2, 25)');
    await client.query('UPDATE orders SET paid = true WHERE id = 2');
    await client.query('RESET search_path');
  } finally {
    client.release();
  }
  await drain(t.db, registry, { workerId: 'example' });
  expect({ receipts, ledger }).toEqual({ receipts: [1, 2], ledger: [1, 2] });
  // The fulfilment run of order 3, waiting for stock, cancelled by its refund.
  const { fulfilOrder } = await import('../examples/events.ts');
  const { enqueue, sendEvent } = await import('../src/entry/index.ts');
  const { id } = await enqueue(t.db, fulfilOrder, { orderId: 3 });
  await drain(t.db, new JobRegistry([fulfilOrder]), { workerId: 'example' });
  await sendEvent(t.db, { event: 'order.refunded', key: 'order:3', payload: { orderId: 3, total: 0 } });
  expect(await t.query('SELECT status FROM pgdrain.jobs_and_history WHERE id = $1', [id])).toEqual([
    { status: 'cancelled' },
  ]);
  await t.query('DELETE FROM pgdrain.subscriptions');
});

it('getting started: a job retried after a failure keeps its attempt log, one that always fails ends dead, a workflow runs its steps once', async () => {
  const { chargeCard, importFeed, onboarding } = await import('../examples/getting-started.ts');
  await resetQueue(t);
  const { enqueue } = await import('../src/entry/index.ts');
  const lines: string[] = [];
  const log = console.log;
  console.log = (line: string) => lines.push(line);
  try {
    const charge = await enqueue(t.db, chargeCard, { orderId: 1 });
    const feed = await enqueue(t.db, importFeed, { url: 'https://feeds.example.com/prices.xml' });
    const run = await enqueue(t.db, onboarding, { userId: 7 });
    const registry = new JobRegistry([chargeCard, importFeed, onboarding]);
    const settled = async () =>
      ['completed', 'dead'].includes((await getJob(t.db, charge.id))?.status ?? '') &&
      (await getJob(t.db, feed.id))?.status === 'dead' &&
      (await getJob(t.db, run.id))?.status === 'completed';
    for (let round = 0; round < 200 && !(await settled()); round++) {
      await drain(t.db, registry, { workerId: 'getting-started' });
      await new Promise((r) => setTimeout(r, 50));
    }
    // What the page says you see: the charge's two attempts, the first failed with its error.
    expect(await getJob(t.db, charge.id)).toMatchObject({
      status: 'completed',
      attempts: 2,
      result: { chargeId: 'ch_1' },
      attemptLog: [expect.objectContaining({ attempt: 1, outcome: 'failed' })],
    });
    expect((await getJob(t.db, charge.id))!.attemptLog).toEqual([
      expect.objectContaining({ error: 'the payment service timed out for order 1' }),
    ]);
    expect(await getJob(t.db, feed.id)).toMatchObject({
      status: 'dead',
      attempts: 2,
      lastError: 'GET https://feeds.example.com/prices.xml answered 404',
    });
    expect(await getJob(t.db, run.id)).toMatchObject({ status: 'completed', result: { accountId: 'acct-7' } });
    expect(lines.filter((l) => !l.startsWith('charging'))).toEqual([
      'account created for user 7',
      'welcome email sent to user 7',
    ]);
    expect(lines.filter((l) => l.startsWith('charging'))).toEqual([
      'charging order 1, attempt 1',
      'charging order 1, attempt 2',
    ]);
  } finally {
    console.log = log;
  }
}, 30_000);
