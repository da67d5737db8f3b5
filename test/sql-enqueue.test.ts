// pgdrain.enqueue(): enqueue from plain SQL (psql, any driver or ORM, a trigger) in the caller's
// own transaction, with the same promises as enqueue(): commit → the job runs, rollback → no row
// and no notification.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { JOB_DEFAULTS, KIND_PATTERN } from '../src/db/constants.ts';
import { drain } from '../src/drain/index.ts';
import { JobRegistry, defineJob, noopJob } from '../src/jobs/index.ts';
import { NOTIFY_CHANNEL } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { resetQueue } from './support/harness.ts';

let t: TestDatabase;
let listener: pg.Client;
const notified: string[] = [];
const ran: unknown[] = [];
const sendReceipt = defineJob({
  kind: 'send_receipt',
  schema: z.object({ orderId: z.number().int() }),
  handler: (payload) => void ran.push(payload),
});
const registry = new JobRegistry([noopJob, sendReceipt]);
const drainAll = () => drain(t.db, registry, { workerId: 'sql-enqueue-test', budgetMs: 10_000 });

beforeAll(async () => {
  t = await createTestDatabase();
  await t.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
  // Listening straight to the server: a transaction pooler (PGDRAIN_TEST_POOLER) does not deliver NOTIFY.
  listener = new pg.Client({ connectionString: t.directUrl });
  await listener.connect();
  listener.on('notification', (n) => notified.push(n.payload ?? ''));
  await listener.query(`LISTEN ${NOTIFY_CHANNEL}`);
});
afterAll(async () => {
  await listener?.end();
  await t?.close();
});
beforeEach(async () => {
  await resetQueue(t, ['orders']);
  notified.length = 0;
  ran.length = 0;
});

/** Runs statements in one transaction on one connection; rolls back when `commit` is false. */
async function inTransaction<T>(commit: boolean, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await t.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    return result;
  } finally {
    client.release();
  }
}
/** Runs a statement that selects one job id `AS id`; returns it. */
async function sqlId(text: string, values?: unknown[]): Promise<string> {
  const [row] = await t.query<{ id: string }>(text, values);
  if (!row) throw new Error(`no id from ${text}`);
  return row.id;
}
const settle = () => new Promise((r) => setTimeout(r, 100));

it('returns the job id; committed with the business row, the job is announced at commit and runs', async () => {
  const id = await inTransaction(true, async (c) => {
    const order = (await c.query(`INSERT INTO orders (item) VALUES ('book') RETURNING id`)).rows[0].id as number;
    const job = (
      await c.query(`SELECT pgdrain.enqueue('send_receipt', jsonb_build_object('orderId', $1::int)) AS id`, [order])
    ).rows[0].id;
    await settle();
    expect(notified).toEqual([]); // not before COMMIT
    return String(job);
  });
  await settle();
  expect(notified).toEqual(['send_receipt']);
  expect(
    await t.query(
      'SELECT id::text, kind, payload, status, attempts, max_attempts, run_at <= now() AS due FROM pgdrain.jobs',
    ),
  ).toEqual([
    { id, kind: 'send_receipt', payload: { orderId: 1 }, status: 'pending', attempts: 0, max_attempts: 3, due: true },
  ]);
  expect((await drainAll()).completed).toBe(1);
  expect(ran).toEqual([{ orderId: 1 }]);
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
});

it('rolled back, neither the business row nor the job exists, and nobody is notified', async () => {
  await inTransaction(false, async (c) => {
    await c.query(`INSERT INTO orders (item) VALUES ('book')`);
    await c.query(`SELECT pgdrain.enqueue('noop', '{}')`);
  });
  await settle();
  expect(
    await t.query(
      'SELECT (SELECT count(*) FROM orders)::int AS orders, (SELECT count(*) FROM pgdrain.jobs)::int AS jobs',
    ),
  ).toEqual([{ orders: 0, jobs: 0 }]);
  expect(notified).toEqual([]);
});

it('takes run_at, max_attempts and a dedupe key; a delayed job is not announced', async () => {
  const id = await sqlId(
    `SELECT pgdrain.enqueue('noop', '{"a":1}', now() + interval '1 hour', 7, 'order-9')::text AS id`,
  );
  const same = await sqlId(`SELECT pgdrain.enqueue('noop', '{"a":2}', dedupe_key => 'order-9')::text AS id`);
  expect(same).toBe(id);
  await settle();
  expect(notified).toEqual([]);
  expect(
    await t.query(
      `SELECT payload, max_attempts, dedupe_key, round(extract(epoch from run_at - now()) / 60) AS minutes FROM pgdrain.jobs`,
    ),
  ).toEqual([{ payload: { a: 1 }, max_attempts: 7, dedupe_key: 'order-9', minutes: '60' }]);
  // Once that job is gone, the key is free again.
  await t.query('DELETE FROM pgdrain.jobs');
  const fresh = await sqlId(`SELECT pgdrain.enqueue('noop', '{}', dedupe_key => 'order-9')::text AS id`);
  expect(fresh).not.toBe(id);
});

it('concurrent calls with one dedupe key make one job and all return its id', async () => {
  const ids = await Promise.all(
    Array.from({ length: 8 }, () => t.query(`SELECT pgdrain.enqueue('noop', '{}', dedupe_key => 'once')::text AS id`)),
  );
  expect(new Set(ids.map((r) => r[0]!.id)).size).toBe(1);
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 1 }]);
});

it('a trigger on an application table enqueues in the same transaction as the row', async () => {
  await t.query(`
    CREATE OR REPLACE FUNCTION order_placed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pgdrain.enqueue('send_receipt', jsonb_build_object('orderId', NEW.id));
      RETURN NEW;
    END $$`);
  await t.query(
    `CREATE OR REPLACE TRIGGER order_placed AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION order_placed()`,
  );
  try {
    const orders = (
      await t.query<{ id: number }>(`INSERT INTO orders (item) VALUES ('lamp'), ('desk') RETURNING id`)
    ).map((o) => o.id);
    await inTransaction(false, (c) => c.query(`INSERT INTO orders (item) VALUES ('rolled back')`));
    const expected = orders.map((orderId) => ({ orderId }));
    expect((await t.query(`SELECT payload FROM pgdrain.jobs ORDER BY id`)).map((r) => r.payload)).toEqual(expected);
    expect((await drainAll()).completed).toBe(2);
    expect(ran).toEqual(expect.arrayContaining(expected));
  } finally {
    await t.query('DROP TRIGGER order_placed ON orders');
  }
});

it('takes a priority (higher runs first), and refuses one outside -1000..1000', async () => {
  const low = await sqlId(`SELECT pgdrain.enqueue('noop', '{"n":1}', priority => -5)::text AS id`);
  const high = await sqlId(`SELECT pgdrain.enqueue('noop', '{"n":2}', priority => 7)::text AS id`);
  const plain = await sqlId(`SELECT pgdrain.enqueue('noop', '{"n":3}')::text AS id`);
  expect(await t.query('SELECT id::text, priority FROM pgdrain.jobs ORDER BY id')).toEqual([
    { id: low, priority: -5 },
    { id: high, priority: 7 },
    { id: plain, priority: 0 },
  ]);
  const order: string[] = [];
  const recorder = new JobRegistry([
    defineJob({ kind: 'noop', schema: z.unknown(), handler: (_, { job }) => void order.push(job.id) }),
  ]);
  await drain(t.db, recorder, { workerId: 'sql-priority', batchSize: 1, concurrency: 1, prefetch: 0 });
  expect(order).toEqual([high, plain, low]);
  await expect(t.query(`SELECT pgdrain.enqueue('noop', '{}', priority => 1001)`)).rejects.toThrow(
    /priority is 1001, it must be between -1000 and 1000/,
  );
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
});

it("takes a group key, and dedupe_mode 'replace': a pending job takes the new payload, a running one gives up its key", async () => {
  const id = await sqlId(
    `SELECT pgdrain.enqueue('noop', '{"v":1}', dedupe_key => 'sync-1', group_key => 'tenant-1', dedupe_mode => 'replace')::text AS id`,
  );
  const later = new Date(Date.now() + 3_600_000).toISOString();
  expect(
    await sqlId(
      `SELECT pgdrain.enqueue('noop', '{"v":2}', $1::timestamptz, dedupe_key => 'sync-1', dedupe_mode => 'replace')::text AS id`,
      [later],
    ),
  ).toBe(id);
  expect(
    await t.query('SELECT id::text, payload, group_key, run_at = $1::timestamptz AS moved FROM pgdrain.jobs', [later]),
  ).toEqual([{ id, payload: { v: 2 }, group_key: 'tenant-1', moved: true }]);
  await t.query(`UPDATE pgdrain.jobs SET status = 'running', locked_at = now(), locked_by = 'busy:1', attempts = 1`);
  const next = await sqlId(
    `SELECT pgdrain.enqueue('noop', '{"v":3}', dedupe_key => 'sync-1', dedupe_mode => 'replace')::text AS id`,
  );
  expect(next).not.toBe(id);
  expect(await t.query('SELECT id::text, status, payload, dedupe_key FROM pgdrain.jobs ORDER BY id')).toEqual([
    { id, status: 'running', payload: { v: 2 }, dedupe_key: null },
    { id: next, status: 'pending', payload: { v: 3 }, dedupe_key: 'sync-1' },
  ]);
});

it('refuses a bad kind, a NULL payload or max_attempts below 1 with a clear error, and stores nothing', async () => {
  await expect(t.query(`SELECT pgdrain.enqueue('no spaces allowed', '{}')`)).rejects.toThrow(
    /kind 'no spaces allowed' is not a job kind/,
  );
  await expect(t.query(`SELECT pgdrain.enqueue(NULL, '{}')`)).rejects.toThrow(/kind NULL is not a job kind/);
  await expect(t.query(`SELECT pgdrain.enqueue('noop', NULL)`)).rejects.toThrow(/payload is NULL/);
  await expect(t.query(`SELECT pgdrain.enqueue('noop', '{}', now(), 0)`)).rejects.toThrow(/max_attempts is 0/);
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
});

it("a payload the kind's schema rejects cannot be checked in SQL: the drainer sends it to dead with the reason", async () => {
  const id = await sqlId(`SELECT pgdrain.enqueue('send_receipt', '{"orderId": "not a number"}')::text AS id`);
  const report = await drainAll();
  expect(report.dead).toBe(1);
  expect(ran).toEqual([]);
  const [row] = await t.query('SELECT status, last_error FROM pgdrain.jobs WHERE id = $1', [id]);
  expect(row).toMatchObject({ status: 'dead' });
  expect(row!.last_error).toMatch(/payload rejected by kind send_receipt: payload\.orderId/);
});

/** The one value of a statement's one row. */
const one = async (text: string, values?: unknown[]): Promise<string> =>
  Object.values((await t.query(text, values))[0]!)[0] as string;

it('takes after (the job waits until every one completed; unknown ids are refused) and timeout_ms', async () => {
  const a = await one(`SELECT pgdrain.enqueue('send_receipt', '{"orderId": 1}')::text AS a`);
  const b = await one(`SELECT pgdrain.enqueue('send_receipt', '{"orderId": 2}')::text AS b`);
  const child = await one(
    `SELECT pgdrain.enqueue('send_receipt', '{"orderId": 3}', after => ARRAY[$1, $2, $1]::bigint[], timeout_ms => 5000)::text AS child`,
    [a, b],
  );
  expect(await t.query(`SELECT status, waiting_for, timeout_ms FROM pgdrain.jobs WHERE id = $1`, [child])).toEqual([
    { status: 'waiting', waiting_for: 2, timeout_ms: 5000 },
  ]);
  expect(notified).toEqual(['send_receipt', 'send_receipt']); // the waiting one is not announced
  // One drain: the completion of the child's last parent makes it pending, and the drain claims again.
  expect(await drainAll()).toMatchObject({ completed: 3 });
  expect(ran).toHaveLength(3);
  expect(ran.at(-1)).toEqual({ orderId: 3 });
  await expect(t.query(`SELECT pgdrain.enqueue('noop', '{}', after => ARRAY[987654321]::bigint[])`)).rejects.toThrow(
    /after names jobs that do not exist: \{987654321\}/,
  );
  await expect(t.query(`SELECT pgdrain.enqueue('noop', '{}', timeout_ms => 50)`)).rejects.toThrow(
    /timeout_ms is 50, use 100/,
  );
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
});

it('pgdrain.cancel(): pending → cancelled at once, running → asked to stop (its drainer is told), completed or unknown → an error saying which', async () => {
  const pending = await one(
    `SELECT pgdrain.enqueue('noop', '{}', run_at => now() + interval '1 hour')::text AS pending`,
  );
  expect(await t.query(`SELECT pgdrain.cancel($1) AS s`, [pending])).toEqual([{ s: 'cancelled' }]);
  expect(await t.query(`SELECT id FROM pgdrain.jobs WHERE id = $1`, [pending])).toEqual([]); // noop keeps nothing
  const cancels = new pg.Client({ connectionString: t.directUrl });
  await cancels.connect();
  const heard: string[] = [];
  cancels.on('notification', (n) => heard.push(`${n.channel}:${n.payload}`));
  await cancels.query('LISTEN pgdrain_cancel');
  const running = await one(
    `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, locked_by, locked_at) VALUES ('noop', '{}', 'running', 1, 'elsewhere:1', now()) RETURNING id::text AS running`,
  );
  expect(await t.query(`SELECT pgdrain.cancel($1) AS s`, [running])).toEqual([{ s: 'cancelling' }]);
  for (let i = 0; i < 50 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
  await cancels.end();
  expect(heard).toEqual([`pgdrain_cancel:${running}`]);
  expect(
    await t.query(`SELECT status, cancel_requested_at IS NOT NULL AS asked FROM pgdrain.jobs WHERE id = $1`, [running]),
  ).toEqual([{ status: 'running', asked: true }]);
  const done = await one(
    `INSERT INTO pgdrain.jobs (kind, payload, status) VALUES ('noop', '{}', 'completed') RETURNING id::text AS done`,
  );
  await expect(t.query(`SELECT pgdrain.cancel($1)`, [done])).rejects.toMatchObject({
    code: '55000',
    message: expect.stringContaining(`job ${done} is completed`),
  });
  await expect(t.query(`SELECT pgdrain.cancel(987654321)`)).rejects.toMatchObject({
    code: 'P0002',
    message: expect.stringContaining('does not exist'),
  });
});

describe('pgdrain.enqueue() in SQL and the TypeScript agree', () => {
  it("on the defaults of max_attempts and priority: the kind's where a drainer wrote it, else the table's", async () => {
    await t.query('DELETE FROM pgdrain.kinds');
    await t.query(`SELECT pgdrain.enqueue('noop', '{}')`);
    expect(await t.query('SELECT max_attempts, priority FROM pgdrain.jobs')).toEqual([
      { max_attempts: JOB_DEFAULTS.maxAttempts, priority: JOB_DEFAULTS.priority },
    ]);
    // Every door alike, option by option and on every driver: test/conformance/kind-doors.ts.
  });

  it('on what a kind may be called', async () => {
    const [{ source }] = (await t.query(
      `SELECT prosrc AS source FROM pg_proc WHERE oid = 'pgdrain.enqueue'::regproc`,
    )) as [{ source: string }];
    expect(source).toContain(`'${KIND_PATTERN.source}'`);
    for (const kind of ['a', 'send_receipt', 'v2.mail:x-y', 'x'.repeat(100), '', 'x'.repeat(101), 'a b', 'ü', "a'b"]) {
      const accepted = await t.query(`SELECT pgdrain.enqueue($1, '{}')`, [kind]).then(
        () => true,
        () => false,
      );
      expect([kind, accepted]).toEqual([kind, KIND_PATTERN.test(kind)]);
    }
  });
});
