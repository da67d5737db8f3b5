// The local WebSocket proxy that lets the Neon driver reach a plain PostgreSQL: it forwards only
// to its one database and adds the one-way delay it is given, so a query's round trip gains twice
// that (how the benchmark runs the Worker at 10 and 30 ms from its database).
import { Pool, neonConfig } from '@neondatabase/serverless';
import { afterAll, beforeAll, expect, it } from 'vitest';
import ws from 'ws';
import { startWsProxy, type WsProxy } from '../src/dev/ws-proxy.ts';
import { useLocalProxy } from '../src/worker/database.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let t: TestDatabase;
let proxy: WsProxy;
beforeAll(async () => {
  t = await createTestDatabase();
  const target = new URL(t.url);
  proxy = await startWsProxy({ target: { host: target.hostname, port: Number(target.port) } });
  neonConfig.webSocketConstructor = ws;
  useLocalProxy(proxy.address);
});
afterAll(async () => {
  await proxy?.close();
  await t?.close();
});

const roundTrip = async (pool: Pool) => {
  const started = performance.now();
  await pool.query('SELECT 1');
  return performance.now() - started;
};

it('adds its one-way delay to each direction, changeable while it runs', async () => {
  const pool = new Pool({ connectionString: t.url, max: 1 });
  pool.on('error', () => {});
  try {
    await pool.query('SELECT 1'); // connect first: the handshake has round trips of its own
    proxy.setDelayMs(25);
    expect(await roundTrip(pool)).toBeGreaterThanOrEqual(48); // two 25 ms legs
    proxy.setDelayMs(0);
    const fastest = Math.min(await roundTrip(pool), await roundTrip(pool), await roundTrip(pool));
    expect(fastest).toBeLessThan(50); // the delay is gone (a query here takes well under a millisecond)
  } finally {
    await pool.end();
  }
});

it('forwards only to its own database', async () => {
  const refused = await new Promise<number>((resolve) => {
    const socket = new ws(`ws://${proxy.address}/v1?address=127.0.0.1:22`);
    socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    socket.on('error', () => resolve(-1));
  });
  expect(refused).toBe(403);
});

it("authenticates for the driver as Neon's proxy does: start-up, password and first query in one round trip", async () => {
  // At 100 ms each way, the pipelined connect and its first query take one round trip (200 ms);
  // SCRAM through the proxy would take four (800 ms).
  proxy.setDelayMs(100);
  const pool = new Pool({ connectionString: t.url, max: 1 });
  pool.on('error', () => {});
  try {
    const started = performance.now();
    const { rows } = await pool.query<{ user: string }>('SELECT current_user AS user');
    const elapsed = performance.now() - started;
    expect(rows).toEqual([{ user: new URL(t.url).username }]);
    expect(elapsed).toBeGreaterThanOrEqual(195);
    expect(elapsed).toBeLessThan(500);
  } finally {
    proxy.setDelayMs(0);
    await pool.end();
  }
});

it('passes on the server refusing a wrong password, and forwards nothing for that client', async () => {
  const wrong = new URL(t.url);
  wrong.password = 'not-the-password';
  const pool = new Pool({ connectionString: wrong.toString(), max: 1 });
  pool.on('error', () => {});
  try {
    await expect(pool.query('SELECT 1')).rejects.toThrow(/password authentication failed/);
  } finally {
    await pool.end().catch(() => {});
  }
});

it("keeps logged-in backends for the next client, as Neon's pooled endpoint does: the session reset, a client's open transaction never passed on", async () => {
  const session = async (fn: (pool: Pool) => Promise<void>) => {
    const pool = new Pool({ connectionString: t.url, max: 1 });
    pool.on('error', () => {});
    try {
      await fn(pool);
    } finally {
      await pool.end();
    }
  };
  const pid = async (pool: Pool) => (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  let first = 0;
  await session(async (pool) => {
    first = await pid(pool);
    await pool.query(`SET application_name = 'first-client'`);
    await pool.query('SELECT pg_advisory_lock(4242)');
  });
  // Handed back only once DISCARD ALL has run on it.
  for (let waited = 0; waited < 2_000; waited += 20) {
    const [row] = await t.query<{ state: string; query: string }>(
      `SELECT state, query FROM pg_stat_activity WHERE pid = $1`,
      [first],
    );
    if (row?.state === 'idle' && row.query === 'DISCARD ALL') break;
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 100)); // its ReadyForQuery on its way to the proxy
  await session(async (pool) => {
    expect(await pid(pool)).toBe(first);
    const { rows } = await pool.query<{ name: string; locks: number }>(
      `SELECT current_setting('application_name') AS name, (SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks`,
    );
    // Back to what the driver's start-up set; the first client's session lock is gone.
    expect(rows).toEqual([{ name: expect.stringMatching(/^pkg:npm\/%40neondatabase\/serverless/), locks: 0 }]);
    // This client leaves inside a transaction: its backend is closed, not passed on.
    await pool.query('BEGIN');
    await pool.query('CREATE TABLE proxy_left_open (n int)');
  });
  await session(async (pool) => {
    expect(await pid(pool)).not.toBe(first);
    expect((await pool.query(`SELECT to_regclass('proxy_left_open') AS t`)).rows).toEqual([{ t: null }]);
  });
});

it('passes on what a client sends while its backend is still logging in', async () => {
  // By hand, as three WebSocket messages sent at once: start-up, password, then a query.
  const { username, password, pathname } = new URL(t.url);
  const params = Buffer.from(`user\0${decodeURIComponent(username)}\0database\0${pathname.slice(1)}\0\0`);
  const startup = Buffer.alloc(8);
  startup.writeInt32BE(8 + params.length, 0);
  startup.writeInt32BE(196608, 4);
  const message = (type: string, body: Buffer) => {
    const header = Buffer.alloc(5);
    header.write(type, 0);
    header.writeInt32BE(body.length + 4, 1);
    return Buffer.concat([header, body]);
  };
  const socket = new ws(`ws://${proxy.address}/v1?address=${new URL(t.url).host}`);
  const received: Buffer[] = [];
  socket.on('message', (data: Buffer) => received.push(Buffer.from(data)));
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  socket.send(Buffer.concat([startup, params]));
  socket.send(message('p', Buffer.from(`${decodeURIComponent(password)}\0`)));
  socket.send(message('Q', Buffer.from(`SELECT 'early bird' AS said\0`)));
  try {
    for (let waited = 0; !Buffer.concat(received).includes('early bird'); waited += 10) {
      if (waited > 3_000) throw new Error(`no answer to the query: ${Buffer.concat(received).toString('latin1')}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    socket.close();
  }
});
