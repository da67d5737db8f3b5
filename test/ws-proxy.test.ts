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
