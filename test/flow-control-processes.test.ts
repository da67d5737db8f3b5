// Limits that hold across every drainer, tried the way they are deployed: two `pgdrain start`
// processes and the Worker under `wrangler dev` (cron invocations back to back, and run-now jobs
// posted to its API) drain one database. Each handler reports its start and end to a recorder here,
// so what ran at once is counted from the handlers themselves.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startWsProxy } from '../src/dev/ws-proxy.ts';
import { enqueueMany } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type FixtureWorker, startFixtureWorker } from './support/fixture-worker.ts';
import { type SidecarProcess, startSidecarProcess, until } from './support/sidecar-process.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/limits/sidecar.ts', import.meta.url));
const WORKER_CONFIG = fileURLToPath(new URL('./fixtures/limits/wrangler.toml', import.meta.url));
const TOKEN = 'limits-test-token-0123456789';

interface RunEvent {
  kind: string;
  n: number;
  key: string | null;
  id: string;
  phase: 'start' | 'end';
  by: string;
  at: number;
}

let t: TestDatabase;
let dir: string;
let worker: FixtureWorker;
let closeProxy: () => Promise<void>;
let recorderUrl: string;
let recorder: http.Server;
const events: RunEvent[] = [];
const sidecars: SidecarProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-limits-'));
  await chmod(dir, 0o755);
  recorder = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      events.push({ ...(JSON.parse(body) as Omit<RunEvent, 'at'>), at: performance.now() });
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  recorderUrl = `http://127.0.0.1:${(recorder.address() as { port: number }).port}/run`;
  const target = new URL(t.url);
  const ws = await startWsProxy({ target: { host: target.hostname, port: Number(target.port) } });
  closeProxy = () => ws.close();
  worker = await startFixtureWorker({
    config: WORKER_CONFIG,
    dir,
    env: { DATABASE_URL: t.url, NEON_WS_PROXY: ws.address, API_TOKEN: TOKEN, DRAIN_BUDGET_MS: '2500', VISIBILITY_TIMEOUT_SECONDS: '3' },
  });
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await closeProxy?.();
  await new Promise((r) => recorder?.close(r));
  await t?.close();
  await rm(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  events.length = 0;
  await t.query('TRUNCATE pgdrain.jobs, pgdrain.rate_starts');
});
afterEach(async () => {
  for (const s of sidecars.splice(0)) {
    s.kill();
    await s.exited;
  }
});

const startSidecars = async (n: number) => {
  for (let i = 0; i < n; i++) {
    sidecars.push(await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, POLL_INTERVAL_MS: '200', VISIBILITY_TIMEOUT_SECONDS: '3', REAP_INTERVAL_MS: '500' }, SIDECAR));
  }
};

/** Cron invocations of the Worker back to back until `done`. */
async function cronUntil(done: () => boolean, timeoutMs: number): Promise<number> {
  let invocations = 0;
  for (const deadline = Date.now() + timeoutMs; !done() && Date.now() < deadline; invocations++) await worker.scheduled();
  return invocations;
}

/** The most runs of `kind` at once. A run that never ended (its process was killed; the job ran
 * again later) counts as ended at `cutAt`. */
function peak(kind: string, cutAt = Infinity): number {
  const marks: { at: number; delta: number }[] = [];
  const byJob = new Map<string, RunEvent[]>();
  for (const e of events.filter((x) => x.kind === kind)) byJob.set(e.id, [...(byJob.get(e.id) ?? []), e]);
  for (const runs of byJob.values()) {
    runs.sort((a, b) => a.at - b.at);
    runs.forEach((e, i) => {
      if (e.phase !== 'start') return;
      const next = runs[i + 1];
      marks.push({ at: e.at, delta: 1 }, { at: next?.phase === 'end' ? next.at : cutAt, delta: -1 });
    });
  }
  marks.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let now = 0;
  let most = 0;
  for (const m of marks) most = Math.max(most, (now += m.delta));
  return most;
}

const ended = (kind: string) => new Set(events.filter((e) => e.kind === kind && e.phase === 'end').map((e) => e.n));

/** Every drainer's first handler run loads its HTTP client (a tenth of a second): done before timing starts. */
async function warmUp(): Promise<void> {
  await enqueueMany(t.db, Array.from({ length: 12 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 0, n: 1000 + n } })));
  await cronUntil(() => ended('limited').size === 12, 20_000);
  await until(async () => ended('limited').size, (n) => n === 12, 10_000, 'the warm-up runs');
  events.length = 0;
}

const postRunNow = (n: number) =>
  fetch(`${worker.url}/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'limited', payload: { recorder: recorderUrl, ms: 300, n }, runNow: true }),
  }).then((r) => r.status);

describe('limits across two sidecar processes and the Worker', () => {
  it('globalConcurrency 3: never more than 3 running across sidecars, cron invocations and run-now, and it reaches 3', async () => {
    await startSidecars(2);
    await enqueueMany(t.db, Array.from({ length: 20 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 300, n } })));
    const posted = await Promise.all(Array.from({ length: 10 }, (_, i) => postRunNow(20 + i)));
    expect(posted.every((s) => s === 201)).toBe(true);
    await cronUntil(() => ended('limited').size === 30, 60_000);
    await until(async () => ended('limited').size, (n) => n === 30, 20_000, 'every limited job to run');
    expect(peak('limited')).toBe(3);
    const by = new Set(events.filter((e) => e.phase === 'end').map((e) => e.by));
    expect(by.has('sidecar')).toBe(true);
    expect(by.has('worker') || by.has('run-now')).toBe(true);
    await until(async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n, (n) => n === 0, 5_000, 'the last completions');
  }, 90_000);

  it('groupConcurrency 1: per key one at a time and in enqueue order, keys side by side', async () => {
    await startSidecars(2);
    await enqueueMany(t.db, Array.from({ length: 30 }, (_, n) => ({ kind: 'grouped', payload: { recorder: recorderUrl, ms: 150, n }, groupKey: `customer-${n % 6}` })));
    await cronUntil(() => ended('grouped').size === 30, 60_000);
    await until(async () => ended('grouped').size, (n) => n === 30, 20_000, 'every grouped job to run');
    for (let key = 0; key < 6; key++) {
      const mine = events.filter((e) => e.kind === 'grouped' && e.key === `customer-${key}`).sort((a, b) => a.at - b.at);
      // start, end, start, end, … in the order they were enqueued: never two of a key at once.
      expect(mine.map((e) => e.phase)).toEqual(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? 'start' : 'end')));
      expect(mine.filter((e) => e.phase === 'start').map((e) => e.n)).toEqual([0, 1, 2, 3, 4].map((i) => i * 6 + key));
    }
    expect(peak('grouped')).toBeGreaterThan(1);
  }, 90_000);

  it('rateLimit 5 a second: no window holds more starts, and the backlog drains at that pace, not slower', async () => {
    await startSidecars(2);
    await warmUp();
    await enqueueMany(t.db, Array.from({ length: 25 }, (_, n) => ({ kind: 'rated', payload: { recorder: recorderUrl, ms: 0, n } })));
    await cronUntil(() => ended('rated').size === 25, 60_000);
    await until(async () => ended('rated').size, (n) => n === 25, 20_000, 'every rated job to run');
    const starts = events.filter((e) => e.kind === 'rated' && e.phase === 'start').map((e) => e.at).sort((a, b) => a - b);
    expect(starts).toHaveLength(25);
    // The database counts starts at the claim; a handler reports a few ms later (0.1 s tolerance).
    for (const s of starts) expect(starts.filter((x) => x >= s && x < s + 900).length).toBeLessThanOrEqual(5);
    // 25 starts at 5 a second: the last one four windows after the first.
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(3_500);
    expect(starts.at(-1)! - starts[0]!).toBeLessThan(6_000);
  }, 90_000);

  it('kill -9 of a sidecar holding slots: they come back when its leases end, nothing is lost, the limit still holds', async () => {
    await startSidecars(2);
    await enqueueMany(t.db, Array.from({ length: 6 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 3_000, n } })));
    await until(async () => events.filter((e) => e.phase === 'start').length, (n) => n === 3, 10_000, 'three slots taken');
    // The process holding most of them, by the pid in its lock token (sidecar-<host>-<pid>-…).
    const holders = await t.query<{ locked_by: string }>(`SELECT locked_by FROM pgdrain.jobs WHERE status = 'running'`);
    const pids = holders.map((h) => Number(/^sidecar-.+-(\d+)-[0-9a-f]+:\d+$/.exec(h.locked_by)?.[1]));
    const victimPid = [...new Set(pids)].sort((a, b) => pids.filter((p) => p === b).length - pids.filter((p) => p === a).length)[0];
    const victim = sidecars.find((s) => s.child.pid === victimPid)!;
    victim.child.kill('SIGKILL');
    await victim.exited;
    const cutAt = performance.now();
    await until(async () => ended('limited').size, (n) => n === 6, 30_000, 'every job to run after the leases end');
    expect(peak('limited', cutAt)).toBeLessThanOrEqual(3);
    // A handler reports its end just before it returns: its completion follows within moments.
    await until(async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n, (n) => n === 0, 5_000, 'the last completions');
  }, 60_000);
});
