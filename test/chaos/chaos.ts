// The chaos suite: several sidecar processes and repeated Worker scheduled() invocations (wrangler
// dev, Neon driver through the WebSocket proxy) drain one PostgreSQL at once while the harness
// kills sidecars with SIGKILL (and restarts them), restarts PostgreSQL and drops every connection
// of the proxies. Each handler run reports to a recorder here. At the end, in SQL and against the
// recorder: every job completed exactly once or is dead by its rule, runs beyond one only for jobs
// in flight at a fault, nothing left running, and the counters equal what happened.
//
// The sidecars do not agree on their visibility timeout (one has 10 s, the others 3 s: a rolling
// config change), and some jobs' handlers ignore their AbortSignal. Faults: kill -9 of a sidecar,
// SIGTERM of one while such a handler runs (1 s grace: it is abandoned, its job released), dropped
// connections, a PostgreSQL restart.
// Both modes enqueue at a steady rate with a fault every few seconds, then let everything settle.
// Short (npm test): 15 s at 200 jobs/s. Long (npm run chaos -- --long): 10 minutes, with the RSS
// and open file descriptors of a sidecar that is never killed sampled once warmed up and at the end.
import { readFile, readdir, chmod, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { type EmbeddedServer, freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { startWsProxy } from '../../src/dev/ws-proxy.ts';
import { type Db, enqueueMany } from '../../src/queries/index.ts';
import { CHAOS_KINDS, CHAOS_MAX_ATTEMPTS } from '../fixtures/chaos/kinds.ts';
import { type SidecarProcess, startSidecarProcess } from '../support/sidecar-process.ts';
import { startFixtureWorker } from '../support/fixture-worker.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

const SIDECAR = fileURLToPath(new URL('../fixtures/chaos/sidecar.ts', import.meta.url));
const WORKER_CONFIG = fileURLToPath(new URL('../fixtures/chaos/wrangler.toml', import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export interface ChaosOptions {
  sidecars: number;
  /** A fault every this many ms, for the duration. */
  faultEveryMs: number;
  /** Enqueue at `enqueuePerSecond` this long, then settle. */
  durationMs: number;
  enqueuePerSecond: number;
  /** Sample a sidecar's memory and descriptors at the start and the end. */
  sampleMemory?: boolean;
  log?: (line: string) => void;
}

export interface ChaosReport {
  jobs: number;
  completed: number;
  dead: number;
  kills: number;
  /** Graceful stops (SIGTERM, 1 s grace) that each exited 0. */
  sigterms: number;
  postgresRestarts: number;
  drops: number;
  workerInvocations: number;
  /** Finished runs by runtime: both must have taken part. */
  finishedBy: Record<string, number>;
  /** Jobs whose handler finished more than once (allowed only for jobs in flight at a fault, and
   * for runs the drain gave up while they reported done: see `revoked` in the chaos kinds). */
  duplicated: number;
  /** Finished runs the drain gave up as they reported (counted as not done, run again). */
  revoked: number;
  duplicatedOutsideFaults: string[];
  /** For each of those: its finished runs (who, which attempt, when) and the faults around them. */
  duplicateDetails: { id: string; runs: { lock: string; attempt: number; atMs: number; revoked?: true }[]; faults: { kind: string; atMs: number }[] }[];
  /** Jobs gone from the table with no finished run, or dead before their rule said so. */
  lost: string[];
  leftRunning: number;
  leftPending: number;
  countersMatch: boolean;
  counters: { completed: number; dead: number };
  rss?: { startKiB: number; endKiB: number; fdsStart: number; fdsEnd: number };
  elapsedMs: number;
}

export const SHORT_CHAOS = { sidecars: 3, faultEveryMs: 1_500, durationMs: 15_000, enqueuePerSecond: 200 } as const;
export const LONG_CHAOS = { sidecars: 3, faultEveryMs: 5_000, durationMs: 10 * 60_000, enqueuePerSecond: 100, sampleMemory: true } as const;

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? (() => {});
  const started = Date.now();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-chaos-'));
  await chmod(dir, 0o755);
  const pgPort = await freePort();
  const startPostgres = () =>
    startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), password: 'chaos-password', port: pgPort, settings: { max_connections: 200, fsync: 'off' } });
  let postgres: EmbeddedServer = await startPostgres();
  const databaseUrl = postgres.url;
  await migrateDatabase(databaseUrl);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 3 });
  pool.on('error', () => {});
  const db = drizzle({ client: pool }) as unknown as Db;

  // --- the recorder: every handler run reports here ------------------------------------------
  const runs = new Map<string, { start: number; fail: number; done: number; revoked: number }>();
  const dones = new Map<string, { lock: string; attempt: number; atMs: number; revoked?: true }[]>();
  const faultLog: { kind: string; atMs: number }[] = [];
  const doneBy = new Map<string, number>();
  const recorder = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      try {
        const event = JSON.parse(body) as { id: string; phase: 'start' | 'fail' | 'done' | 'revoked'; by?: string; lock?: string; attempt?: number };
        const entry = runs.get(event.id) ?? { start: 0, fail: 0, done: 0, revoked: 0 };
        entry[event.phase]++;
        if (event.phase === 'done') dones.set(event.id, [...(dones.get(event.id) ?? []), { lock: event.lock ?? '', attempt: event.attempt ?? 0, atMs: Date.now() - started }]);
        if (event.phase === 'revoked') {
          const run = dones.get(event.id)?.find((d) => d.lock === event.lock && d.attempt === event.attempt);
          if (run) run.revoked = true;
        }
        if (event.by) doneBy.set(event.by, (doneBy.get(event.by) ?? 0) + 1);
        runs.set(event.id, entry);
      } catch {
        // not ours
      }
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  const recorderUrl = `http://127.0.0.1:${(recorder.address() as { port: number }).port}/run`;

  // --- the network the drainers reach PostgreSQL through ---------------------------------------
  const tcp = await startTcpProxy({ host: '127.0.0.1', port: pgPort });
  const ws = await startWsProxy({ target: { host: '127.0.0.1', port: pgPort } });

  // --- sidecars --------------------------------------------------------------------------------
  const sidecarEnv = (i: number) => ({
    DATABASE_URL: tcp.urlFor(databaseUrl), API_TOKEN: 'chaos-token-0123456789', VISIBILITY_TIMEOUT_SECONDS: i === 0 ? '10' : '3',
    REAP_INTERVAL_MS: '500', POLL_INTERVAL_MS: '200', BATCH_SIZE: '50', CONCURRENCY: '50', SHUTDOWN_GRACE_MS: '1000', LOG_LEVEL: 'info',
  });
  const sidecars: SidecarProcess[] = [];
  for (let i = 0; i < options.sidecars; i++) sidecars.push(await startSidecarProcess(sidecarEnv(i), SIDECAR));

  // --- the Worker, invoked on a tight loop ------------------------------------------------------
  const worker = await startFixtureWorker({
    config: WORKER_CONFIG,
    dir,
    env: { DATABASE_URL: databaseUrl, NEON_WS_PROXY: ws.address, API_TOKEN: 'chaos-token-0123456789', DRAIN_BUDGET_MS: '2000', VISIBILITY_TIMEOUT_SECONDS: '3', BATCH_SIZE: '20' },
  });

  const report: ChaosReport = {
    jobs: 0, completed: 0, dead: 0, kills: 0, sigterms: 0, postgresRestarts: 0, drops: 0, workerInvocations: 0, finishedBy: {}, duplicated: 0, revoked: 0,
    duplicatedOutsideFaults: [], duplicateDetails: [], lost: [], leftRunning: 0, leftPending: 0, countersMatch: false, counters: { completed: 0, dead: 0 }, elapsedMs: 0,
  };
  const enqueued = new Set<string>();
  let sequence = 0;
  const enqueue = async (n: number) => {
    const jobs = Array.from({ length: n }, () => {
      const i = sequence++;
      // Most jobs are quick; some slow; some fail on purpose a few times; one in 50 is doomed; one
      // in 23 sleeps 2.5 s through its AbortSignal.
      const failUntil = i % 50 === 0 ? CHAOS_MAX_ATTEMPTS : i % 10 === 0 ? 2 : 0;
      const stubborn = i % 23 === 0;
      return { kind: CHAOS_KINDS[i % CHAOS_KINDS.length]!, payload: { recorder: recorderUrl, ms: stubborn ? 2_500 : i % 7 === 0 ? 200 : 5, failUntil, ignoreSignal: stubborn } };
    });
    for (const job of await enqueueMany(db, jobs)) enqueued.add(job.id);
  };

  let running = true;
  const workerLoop = (async () => {
    while (running) {
      try {
        await worker.scheduled();
        report.workerInvocations++;
      } catch {
        // workerd busy or restarting: the next round tries again
      }
      await sleep(300);
    }
  })();

  // Jobs running at a fault may run twice; snapshots just before and just after each fault.
  const inFlightAtFault = new Set<string>();
  const snapshotRunning = async () => {
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        const { rows } = await pool.query<{ id: string }>(`SELECT id::text FROM pgdrain.jobs WHERE status = 'running'`);
        for (const r of rows) inFlightAtFault.add(r.id);
        return;
      } catch {
        await sleep(250); // PostgreSQL coming back
      }
    }
  };
  const remaining = async () => Number((await pool.query(`SELECT count(*) FILTER (WHERE status <> 'dead')::int AS n FROM pgdrain.jobs`)).rows[0].n);

  const sampleProcess = async (pid: number | undefined) => {
    if (!pid) return { rss: 0, fds: 0 };
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const fds = (await readdir(`/proc/${pid}/fd`).catch(() => [])).length;
    return { rss, fds };
  };

  const faults = ['kill', 'drop', 'sigterm', 'kill', 'drop', 'postgres'] as const;
  let faultIndex = 0;
  const fault = async () => {
    const kind = faults[faultIndex++ % faults.length]!;
    if (kind === 'postgres' && report.postgresRestarts >= 1) return; // one restart per run
    faultLog.push({ kind, atMs: Date.now() - started });
    await snapshotRunning();
    if (kind === 'kill' || kind === 'sigterm') {
      const victim = (report.kills + report.sigterms) % Math.max(1, sidecars.length - 1); // never the last one (see rss)
      const old = sidecars[victim]!;
      old.child.kill(kind === 'kill' ? 'SIGKILL' : 'SIGTERM');
      const exit = await old.exited;
      await snapshotRunning();
      sidecars[victim] = await startSidecarProcess(sidecarEnv(victim), SIDECAR);
      if (kind === 'kill') report.kills++;
      else if (exit.code === 0) report.sigterms++;
      else throw new Error(`a sidecar stopped by SIGTERM exited with ${JSON.stringify(exit)}:\n${old.stdout()}`);
      log(`chaos: ${kind === 'kill' ? 'kill -9' : 'SIGTERM (1 s grace)'} of sidecar ${victim + 1} (pid ${old.child.pid}), restarted`);
    } else if (kind === 'drop') {
      const dropped = tcp.dropConnections() + ws.dropConnections();
      report.drops++;
      await sleep(100);
      await snapshotRunning();
      log(`chaos: dropped ${dropped} connections`);
    } else {
      await postgres.stop();
      await sleep(500);
      postgres = await startPostgres();
      report.postgresRestarts++;
      await snapshotRunning();
      log('chaos: PostgreSQL restarted');
    }
  };

  try {
    // Sidecar 3 is never killed (kills pick among the others): its memory says whether anything leaks.
    const steady = sidecars.length - 1;
    // Sampled once warmed up (a fifth into the run: pools full, code compiled) and at the end after
    // the pools' idle timeout, so that the two are comparable.
    let rssStart: { rss: number; fds: number } | undefined;
    const sampleAt = Date.now() + options.durationMs / 5;
    const end = Date.now() + options.durationMs;
    let nextFault = Date.now() + options.faultEveryMs;
    // At least the first five faults (two kills, a SIGTERM, two drops) even on a slow machine.
    while (Date.now() < end || faultIndex < 5) {
      await enqueue(Math.max(1, Math.round(options.enqueuePerSecond / 4)));
      if (Date.now() >= nextFault) {
        await fault();
        nextFault = Date.now() + options.faultEveryMs;
      }
      if (options.sampleMemory && !rssStart && Date.now() >= sampleAt) rssStart = await sampleProcess(sidecars[steady]!.child.pid);
      await sleep(250);
    }
    if (report.postgresRestarts === 0) {
      faultIndex = faults.indexOf('postgres');
      await fault();
    }
    // Let everything settle: the reaper returns what the faults orphaned.
    const settleBy = Date.now() + 90_000;
    while ((await remaining()) > 0 && Date.now() < settleBy) await sleep(250);
    if (rssStart) {
      await sleep(12_000); // past pg.Pool's 10 s idle timeout
      const rssEnd = await sampleProcess(sidecars[steady]!.child.pid);
      report.rss = { startKiB: rssStart.rss, endKiB: rssEnd.rss, fdsStart: rssStart.fds, fdsEnd: rssEnd.fds };
    }
  } finally {
    running = false;
    await workerLoop;
    await Promise.all(sidecars.map(async (s) => {
      s.child.kill('SIGTERM');
      await s.exited;
    }));
    await worker.stop();
  }

  // --- the verdict --------------------------------------------------------------------------------
  const left = await pool.query<{ id: string; status: string; attempts: number; max_attempts: number }>(
    `SELECT id::text, status, attempts, max_attempts FROM pgdrain.jobs`,
  );
  const inTable = new Map(left.rows.map((r) => [r.id, r]));
  report.jobs = enqueued.size;
  report.leftRunning = left.rows.filter((r) => r.status === 'running').length;
  report.leftPending = left.rows.filter((r) => r.status === 'pending').length;
  for (const id of enqueued) {
    const row = inTable.get(id);
    const done = runs.get(id)?.done ?? 0;
    const revoked = runs.get(id)?.revoked ?? 0;
    report.revoked += revoked;
    if (!row) {
      // Deleted: it must have finished at least once, in a run the drain did not give up.
      if (done - revoked === 0) report.lost.push(id);
      else report.completed++;
      if (done > 1) {
        report.duplicated++;
        if (done - revoked > 1 && !inFlightAtFault.has(id)) {
          report.duplicatedOutsideFaults.push(id);
          const runsOfJob = dones.get(id) ?? [];
          const near = (f: { atMs: number }) => runsOfJob.some((r) => Math.abs(r.atMs - f.atMs) < 15_000);
          report.duplicateDetails.push({ id, runs: runsOfJob, faults: faultLog.filter(near) });
        }
      }
    } else if (row.status === 'dead') {
      report.dead++;
      if (row.attempts < row.max_attempts) report.lost.push(id); // dead before its rule
    }
  }
  const counts = (await pool.query(`SELECT coalesce(sum(completed), 0)::int AS completed, coalesce(sum(dead), 0)::int AS dead FROM pgdrain.job_counts`)).rows[0];
  report.counters = { completed: counts.completed, dead: counts.dead };
  report.countersMatch = counts.completed === report.completed && counts.dead === report.dead;
  report.finishedBy = Object.fromEntries(doneBy);
  report.elapsedMs = Date.now() - started;

  await pool.end();
  await tcp.close();
  await ws.close();
  await new Promise((r) => recorder.close(r));
  await postgres.stop();
  await rm(dir, { recursive: true, force: true });
  return report;
}
