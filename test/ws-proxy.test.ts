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
