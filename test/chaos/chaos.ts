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
// connections, a PostgreSQL restart. The first SIGTERM is a deploy: its sidecar comes back with a
// version 2 of the workflow beside version 1, and new runs start on version 2 from then on.
// Besides plain jobs the run carries what wave 4 added (test/fixtures/chaos/kinds.ts): workflows
// (a plain step, a transactional step, a sleep, a wait for an event the harness sends in SQL during
// the faults, an invoked child), a fair kind of many keys with per-key overrides, and a batch kind;
// the Worker runs with the queue's clock (its alarms drain too). At the end: every run completed,
// each transactional write is there once, a plain step ran again only for a run in flight at a
// fault, no key ever ran more at once than its limit, no batch item was lost, the counters match,
// nothing is left pending, running or waiting.
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
import type { JobDefinition } from '../../src/jobs/definition.ts';
import { prepareJob } from '../../src/jobs/enqueue.ts';
import { type Db, enqueueMany } from '../../src/queries/index.ts';
import {
  BATCH_KIND,
  CHAOS_EFFECTS_DDL,
  CHAOS_KINDS,
  CHAOS_MAX_ATTEMPTS,
  CHILD_KIND,
  FAIR_GROUP_CONCURRENCY,
  FAIR_KEYS,
  FAIR_KIND,
  FAIR_OVERRIDES,
  FLOW_EVENT,
  FLOW_KIND,
  chaosFlowV2,
  chaosJobs,
  flowEventKey,
} from '../fixtures/chaos/kinds.ts';
import { type SidecarProcess, startSidecarProcess } from '../support/sidecar-process.ts';
import { startFixtureWorker } from '../support/fixture-worker.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { sleep } from '../support/time.ts';

const SIDECAR = fileURLToPath(new URL('../fixtures/chaos/sidecar.ts', import.meta.url));
/** The same sidecar after a deploy: the flow's version 1 beside a version 2 (kinds.ts). */
const SIDECAR_DEPLOYED = fileURLToPath(new URL('../fixtures/chaos/sidecar-deployed.ts', import.meta.url));
const WORKER_CONFIG = fileURLToPath(new URL('../fixtures/chaos/wrangler.toml', import.meta.url));
/** Each Worker invocation's budget (DRAIN_BUDGET_MS): its handlers are given up near its end. */
const WORKER_BUDGET_MS = 2_000;

/** The Worker's log lines that name a drainer of `runs` (lock tokens are `<drainer id>:<n>`), or a
 * pool's error: at most the last 20. */
function workerLinesAbout(output: string, runs: readonly { lock: string }[]): string[] {
  const drainers = runs.map((r) => r.lock.split(':')[0]!).filter((d) => d.startsWith('worker-'));
  return output
    .split('\n')
    .filter((line) => line.includes('pool_error') || drainers.some((d) => line.includes(d)))
    .slice(-20);
}

/**
 * A Worker's finished run (lock token `worker-<start ms>-…` or `worker-alarm-<start ms>-…`) that
 * reported in the last margin of its invocation's budget (10%, at most 1 s: the drain gives its
 * handlers up halfway through it). Its attempt may have been given up as its report went out: then
 * it fails and runs again, and its `revoked` report, sent after its signal, may be cut off with the
 * invocation (docs/workers.md). `started`: the harness's start (ms since the epoch; `atMs` counts
 * from it).
 */
function doneAtTheBudget(run: { lock: string; atMs: number }, started: number): boolean {
  const invocationStart = Number(/^worker-(?:alarm-)?(\d+)-/.exec(run.lock)?.[1]);
  if (!Number.isFinite(invocationStart)) return false;
  const margin = Math.min(1_000, WORKER_BUDGET_MS * 0.1);
  return started + run.atMs >= invocationStart + WORKER_BUDGET_MS - margin;
}

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
  /** Jobs enqueued to fail every attempt: each must end dead. */
  doomed: number;
  kills: number;
  /** Graceful stops (SIGTERM, 1 s grace) that each exited 0. */
  sigterms: number;
  /** Sidecars restarted on the deployed code (the first SIGTERM's restart deploys: the flow's
   * version 2 beside version 1; new runs start on version 2 from then on). */
  deploys: number;
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
  /** Finished Worker runs that reported in the last margin of their invocation's budget, and ran
   * again: the budget gave them up as they reported, and the invocation, ending, may cut off their
   * `revoked` report (a timeout of the budget's own: at-least-once). */
  doneAtTheBudget: number;
  duplicatedOutsideFaults: string[];
  /** For each of those: its finished runs (who, which attempt, when) and the faults around them. */
  duplicateDetails: {
    id: string;
    runs: { lock: string; attempt: number; atMs: number; revoked?: true }[];
    faults: { kind: string; atMs: number }[];
    /** What the Worker logged of the drains that ran it (its failed statements: settle_failed,
     * claim_failed), and its pools' errors. */
    workerLines: string[];
  }[];
  /** Jobs gone from the table with no finished run, or dead before their rule said so. */
  lost: string[];
  leftRunning: number;
  /** The sidecars' VACUUMs of the jobs table (VACUUM_EVERY_JOBS) since PostgreSQL last started: they
   * ran amid the faults. */
  vacuums: number;
  leftPending: number;
  leftWaiting: number;
  /** Sidecars that had not exited 20 s after the final SIGTERM (with their last lines of output). */
  stuckAtStop: string[];
  countersMatch: boolean;
  counters: { completed: number; dead: number };
  /** Workflow runs: enqueued, completed (kept, with the result every step led to). */
  flows: {
    runs: number;
    completed: number;
    eventsSent: number;
    children: number;
    childrenCompleted: number;
    /** Completed on version 2, the deploy's (they ran on deployed sidecars only). */
    onVersion2: number;
  };
  /** Runs whose transactional step's row is not there exactly once. */
  transactionalWritesNotOnce: string[];
  /** Plain steps that ran more than once for a run not in flight at any fault. */
  plainStepsRepeatedOutsideFaults: string[];
  /** Plain steps that ran again (at a fault). */
  plainStepRepeats: number;
  /** Runs that did not complete with the result their steps give. */
  flowsNotCompleted: string[];
  /** The fair kind: its jobs, the spans reported, and for each key the most seen running at once
   * against its limit (the kind's, or its override). */
  fair: { jobs: number; spans: number; mostAtOnce: Record<string, { seen: number; limit: number }> };
  /** Keys that ever ran more at once than their limit. */
  limitsExceeded: string[];
  batch: { items: number; completed: number; dead: number };
  rss?: { startKiB: number; endKiB: number; fdsStart: number; fdsEnd: number };
  elapsedMs: number;
}

export const SHORT_CHAOS = { sidecars: 3, faultEveryMs: 1_500, durationMs: 15_000, enqueuePerSecond: 200 } as const;
export const LONG_CHAOS = {
  sidecars: 3,
  faultEveryMs: 5_000,
  durationMs: 10 * 60_000,
  enqueuePerSecond: 100,
  sampleMemory: true,
} as const;

/** A chaos run; whatever it started is stopped when it ends, also when it fails part-way (a sidecar
 * that does not start, an error of the harness): no PostgreSQL, proxy or process is left behind. */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    return await chaosRun(options, (cleanup) => cleanups.push(cleanup));
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  }
}

async function chaosRun(options: ChaosOptions, onEnd: (cleanup: () => Promise<unknown>) => void): Promise<ChaosReport> {
  const log = options.log ?? (() => {});
  const started = Date.now();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-chaos-'));
  onEnd(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o755);
  const pgPort = await freePort();
  const startPostgres = () =>
    startEmbeddedPostgres({
      dataDir: path.join(dir, 'data'),
      password: 'chaos-password',
      port: pgPort,
      settings: { max_connections: 200, fsync: 'off' },
    });
  let postgres: EmbeddedServer = await startPostgres();
  onEnd(() => postgres.stop()); // the one running then (a restart replaces it)
  const databaseUrl = postgres.url;
  await migrateDatabase(databaseUrl);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 3 });
  onEnd(() => pool.end());
  pool.on('error', () => {});
  const db = drizzle({ client: pool }) as unknown as Db;
  await pool.query(CHAOS_EFFECTS_DDL);
  // The fair kind's keys with limits of their own, as an operator sets them (SQL).
  for (const [key, concurrency] of Object.entries(FAIR_OVERRIDES))
    await pool.query(`SELECT pgdrain.set_group_limits($1, $2, concurrency => $3)`, [FAIR_KIND, key, concurrency]);

  // --- the recorder: every handler run reports here ------------------------------------------
  const runs = new Map<string, { start: number; fail: number; done: number; revoked: number }>();
  const dones = new Map<string, { lock: string; attempt: number; atMs: number; revoked?: true }[]>();
  const faultLog: { kind: string; atMs: number }[] = [];
  const doneBy = new Map<string, number>();
  /** A flow's plain step: each run of it. */
  const plainSteps = new Map<string, number>();
  /** The fair kind's runs that reported their span (kill -9 leaves none). */
  const spans: { id: string; key: string; startedAt: number; endedAt: number }[] = [];
  type RecorderEvent = {
    id: string;
    phase: 'start' | 'fail' | 'done' | 'revoked' | 'span' | 'step';
    by?: string;
    lock?: string;
    attempt?: number;
    key?: string;
    startedAt?: number;
    endedAt?: number;
  };
  const recordEvent = (event: RecorderEvent) => {
    if (event.phase === 'span')
      return void spans.push({ id: event.id, key: event.key!, startedAt: event.startedAt!, endedAt: event.endedAt! });
    if (event.phase === 'step') return void plainSteps.set(event.id, (plainSteps.get(event.id) ?? 0) + 1);
    const entry = runs.get(event.id) ?? { start: 0, fail: 0, done: 0, revoked: 0 };
    entry[event.phase]++;
    if (event.phase === 'done')
      dones.set(event.id, [
        ...(dones.get(event.id) ?? []),
        { lock: event.lock ?? '', attempt: event.attempt ?? 0, atMs: Date.now() - started },
      ]);
    if (event.phase === 'revoked') {
      const run = dones.get(event.id)?.find((d) => d.lock === event.lock && d.attempt === event.attempt);
      if (run) run.revoked = true;
    }
    if (event.by) doneBy.set(event.by, (doneBy.get(event.by) ?? 0) + 1);
    runs.set(event.id, entry);
  };
  const recorder = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      try {
        const events = JSON.parse(body) as RecorderEvent | RecorderEvent[];
        for (const event of Array.isArray(events) ? events : [events]) recordEvent(event);
      } catch {
        // not ours
      }
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  onEnd(() => new Promise((resolve) => recorder.close(resolve)));
  const recorderUrl = `http://127.0.0.1:${(recorder.address() as { port: number }).port}/run`;

  // --- the network the drainers reach PostgreSQL through ---------------------------------------
  const tcp = await startTcpProxy({ host: '127.0.0.1', port: pgPort });
  onEnd(() => tcp.close());
  const ws = await startWsProxy({ target: { host: '127.0.0.1', port: pgPort } });
  onEnd(() => ws.close());

  // --- sidecars --------------------------------------------------------------------------------
  // Each sidecar has its own DRAINER_ID, as deployments give them: one restarted after kill -9
  // takes its name back and releases at once what the killed one held.
  const sidecarEnv = (i: number) => ({
    DRAINER_ID: `chaos-${i + 1}`,
    DATABASE_URL: tcp.urlFor(databaseUrl),
    API_TOKEN: 'chaos-token-0123456789',
    VISIBILITY_TIMEOUT_SECONDS: i === 0 ? '10' : '3',
    REAP_INTERVAL_MS: '500',
    POLL_INTERVAL_MS: '200',
    BATCH_SIZE: '50',
    CONCURRENCY: '50',
    SHUTDOWN_GRACE_MS: '1000',
    // Their VACUUM of the jobs table runs often, so kills, drops and restarts meet it mid-way.
    VACUUM_EVERY_JOBS: '300',
    LOG_LEVEL: 'info',
  });
  const sidecars: SidecarProcess[] = [];
  // Those still running at the end (the run failed before it stopped them) are killed.
  onEnd(async () => {
    for (const s of sidecars) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
  });
  for (let i = 0; i < options.sidecars; i++) sidecars.push(await startSidecarProcess(sidecarEnv(i), SIDECAR));

  // --- the Worker, invoked on a tight loop ------------------------------------------------------
  const worker = await startFixtureWorker({
    config: WORKER_CONFIG,
    dir,
    // With the queue's clock: the harness's SQL enqueues are behind its back, so its cron looks
    // at least every second (the backstop); what it learns itself (parks, retries, leases) rings
    // its alarm.
    env: {
      DATABASE_URL: databaseUrl,
      NEON_WS_PROXY: ws.address,
      API_TOKEN: 'chaos-token-0123456789',
      DRAIN_BUDGET_MS: String(WORKER_BUDGET_MS),
      VISIBILITY_TIMEOUT_SECONDS: '3',
      BATCH_SIZE: '20',
      BACKSTOP_POLL_SECONDS: '1',
    },
  });
  onEnd(() => worker.stop());

  const report: ChaosReport = {
    jobs: 0,
    completed: 0,
    dead: 0,
    doomed: 0,
    kills: 0,
    sigterms: 0,
    deploys: 0,
    postgresRestarts: 0,
    drops: 0,
    workerInvocations: 0,
    finishedBy: {},
    duplicated: 0,
    revoked: 0,
    doneAtTheBudget: 0,
    duplicatedOutsideFaults: [],
    duplicateDetails: [],
    lost: [],
    leftRunning: 0,
    vacuums: 0,
    leftPending: 0,
    leftWaiting: 0,
    stuckAtStop: [],
    countersMatch: false,
    counters: { completed: 0, dead: 0 },
    flows: { runs: 0, completed: 0, eventsSent: 0, children: 0, childrenCompleted: 0, onVersion2: 0 },
    transactionalWritesNotOnce: [],
    plainStepsRepeatedOutsideFaults: [],
    plainStepRepeats: 0,
    flowsNotCompleted: [],
    fair: { jobs: 0, spans: 0, mostAtOnce: {} },
    limitsExceeded: [],
    batch: { items: 0, completed: 0, dead: 0 },
    elapsedMs: 0,
  };
  const definitions = new Map<string, JobDefinition<any>>(chaosJobs.map((j) => [j.kind, j]));
  const deployed = new Set<number>();
  /** Flows by id: their n, when enqueued, and whether their event was sent. */
  const flows = new Map<string, { n: number; enqueuedAt: number; eventSent: boolean }>();
  const fairJobs = new Set<string>();
  const batchItems = new Set<string>();
  const enqueued = new Set<string>();
  let sequence = 0;
  const MIX = [...CHAOS_KINDS, FAIR_KIND, BATCH_KIND] as const;
  let fairSequence = 0;
  const enqueue = async (n: number) => {
    const jobs = Array.from({ length: n }, () => {
      const i = sequence++;
      const kind = MIX[i % MIX.length]!;
      // Most jobs are quick; some slow; some fail on purpose a few times; one in 50 is doomed; one
      // in 23 sleeps 2.5 s through its AbortSignal (never a fair one: a handler that outlives its
      // release would run beside the key's next job by its own choice, not the queue's).
      const failUntil = i % 50 === 0 ? CHAOS_MAX_ATTEMPTS : i % 10 === 0 ? 2 : 0;
      const stubborn = i % 23 === 0 && kind !== FAIR_KIND && kind !== BATCH_KIND;
      const payload = {
        recorder: recorderUrl,
        ms: stubborn ? 2_500 : i % 7 === 0 ? 200 : 5,
        failUntil,
        ignoreSignal: stubborn,
      };
      if (failUntil >= CHAOS_MAX_ATTEMPTS) report.doomed++;
      if (kind === FAIR_KIND) {
        // Keys of unequal weight: tenant-0 (held to one at a time) and tenant-1 (let to four) get the most.
        const f = fairSequence++;
        const key =
          f % 3 === 0
            ? FAIR_KEYS[0]!
            : f % 3 === 1
              ? FAIR_KEYS[1]!
              : FAIR_KEYS[2 + (Math.floor(f / 3) % (FAIR_KEYS.length - 2))]!;
        return prepareJob(definitions.get(kind)!, {
          payload: { ...payload, ms: i % 4 === 0 ? 150 : 20, key },
          groupKey: key,
        });
      }
      return prepareJob(definitions.get(kind)!, { payload });
    });
    // A workflow run per round.
    const n0 = sequence++;
    jobs.push(prepareJob(definitions.get(FLOW_KIND)!, { payload: { recorder: recorderUrl, n: n0 } }));
    const ids = await enqueueMany(db, jobs);
    ids.forEach((job, i) => {
      const kind = jobs[i]!.kind;
      if (kind === FLOW_KIND) flows.set(job.id, { n: n0, enqueuedAt: Date.now(), eventSent: false });
      else enqueued.add(job.id);
      if (kind === FAIR_KIND) fairJobs.add(job.id);
      if (kind === BATCH_KIND) batchItems.add(job.id);
    });
  };
  // The events the flows wait for, sent in SQL (as another program would) a second after their
  // run was enqueued — whatever the faults are doing; a send that fails is tried at the next round.
  const sendEvents = async () => {
    const due = [...flows].filter(([, f]) => !f.eventSent && Date.now() - f.enqueuedAt >= 1_000).map(([id]) => id);
    if (due.length === 0) return;
    try {
      await pool.query(
        `SELECT pgdrain.send_event($1, $2 || id, '{"approved": true}') FROM unnest($3::bigint[]) AS id`,
        [FLOW_EVENT, flowEventKey(''), due],
      );
      for (const id of due) flows.get(id)!.eventSent = true;
      report.flows.eventsSent += due.length;
    } catch {
      // PostgreSQL restarting or the connection dropped: sent at the next round (a send whose
      // commit was lost on the way may be sent twice: the wait takes one, the other is pruned)
    }
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
  const remaining = async () =>
    Number(
      (
        await pool.query(
          `SELECT count(*) FILTER (WHERE status IN ('pending', 'running', 'waiting'))::int AS n FROM pgdrain.jobs`,
        )
      ).rows[0].n,
    );

  const sampleProcess = async (pid: number | undefined) => {
    if (!pid) return { rss: 0, fds: 0 };
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const fds = (await readdir(`/proc/${pid}/fd`).catch(() => [])).length;
    return { rss, fds };
  };

  // A graceful stop ends within its grace (1 s) and the pools' close: one that has not exited 20 s
  // after SIGTERM is a finding (its CPU and last lines kept), and is killed so the run goes on.
  const stopped = async (s: SidecarProcess, i: number) => {
    const exit = await Promise.race([s.exited, sleep(20_000).then(() => null)]);
    if (exit !== null) return exit;
    const cpu = async () =>
      (await readFile(`/proc/${s.child.pid}/stat`, 'utf8').catch(() => ''))
        .split(' ')
        .slice(13, 15)
        .map(Number)
        .reduce((a, b) => a + b, 0);
    const before = await cpu();
    await sleep(1_000);
    const busy = (await cpu()) - before; // clock ticks (1/100 s) in that second
    report.stuckAtStop.push(
      `sidecar ${i + 1} (pid ${s.child.pid}), ${busy}% CPU: ${s.stdout().split('\n').slice(-40).join('\n')}`,
    );
    s.child.kill('SIGKILL');
    await s.exited;
    return { code: 0, signal: null };
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
      const exit = await stopped(old, victim);
      await snapshotRunning();
      // A deploy: the first graceful stop restarts its sidecar on the new code, and from then on the
      // harness (the application) enqueues flows on version 2. A deployed sidecar stays deployed.
      if (kind === 'sigterm' && deployed.size === 0) {
        deployed.add(victim);
        definitions.set(FLOW_KIND, chaosFlowV2);
        report.deploys++;
        log(`chaos: sidecar ${victim + 1} deployed with version 2 of ${FLOW_KIND}; new runs start on it`);
      }
      sidecars[victim] = await startSidecarProcess(
        sidecarEnv(victim),
        deployed.has(victim) ? SIDECAR_DEPLOYED : SIDECAR,
      );
      if (kind === 'kill') report.kills++;
      else if (exit.code === 0) report.sigterms++;
      else throw new Error(`a sidecar stopped by SIGTERM exited with ${JSON.stringify(exit)}:\n${old.stdout()}`);
      log(
        `chaos: ${kind === 'kill' ? 'kill -9' : 'SIGTERM (1 s grace)'} of sidecar ${victim + 1} (pid ${old.child.pid}), restarted`,
      );
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
      await sendEvents();
      if (Date.now() >= nextFault) {
        await fault();
        nextFault = Date.now() + options.faultEveryMs;
      }
      if (options.sampleMemory && !rssStart && Date.now() >= sampleAt)
        rssStart = await sampleProcess(sidecars[steady]!.child.pid);
      await sleep(250);
    }
    if (report.postgresRestarts === 0) {
      faultIndex = faults.indexOf('postgres');
      await fault();
    }
    // Let everything settle: the reaper returns what the faults orphaned.
    const settleBy = Date.now() + 90_000;
    let nextNote = Date.now() + 10_000;
    for (;;) {
      await sendEvents();
      let left = 1;
      try {
        left = await remaining();
      } catch {
        // PostgreSQL restarted a moment ago
      }
      if (left === 0 || Date.now() >= settleBy) break;
      if (Date.now() >= nextNote) {
        nextNote = Date.now() + 10_000;
        const byState = await pool
          .query<{ kind: string; status: string; n: number }>(
            `SELECT kind, status, count(*)::int AS n FROM pgdrain.jobs WHERE status IN ('pending', 'running', 'waiting') GROUP BY 1, 2`,
          )
          .then(
            (r) => r.rows.map((x) => `${x.kind} ${x.status} ${x.n}`).join(', '),
            () => 'unknown',
          );
        log(`chaos: settling, left: ${byState}`);
      }
      await sleep(250);
    }
    log('chaos: settled');
    if (rssStart) {
      await sleep(12_000); // past pg.Pool's 10 s idle timeout
      const rssEnd = await sampleProcess(sidecars[steady]!.child.pid);
      report.rss = { startKiB: rssStart.rss, endKiB: rssEnd.rss, fdsStart: rssStart.fds, fdsEnd: rssEnd.fds };
    }
  } finally {
    running = false;
    await workerLoop;
    log('chaos: stopping the sidecars and the Worker');
    await Promise.all(
      sidecars.map(async (s, i) => {
        s.child.kill('SIGTERM');
        await stopped(s, i);
      }),
    );
    log('chaos: sidecars stopped');
    await worker.stop();
    log('chaos: Worker stopped');
  }
  const workerOutput = worker.output();

  // --- the verdict --------------------------------------------------------------------------------
  const left = await pool.query<{
    id: string;
    kind: string;
    status: string;
    attempts: number;
    max_attempts: number;
    result: unknown;
  }>(
    // Kept jobs (the flows and their children) are in the history once completed: the view has both.
    `SELECT id::text, kind, status, attempts, max_attempts, result FROM pgdrain.jobs_and_history`,
  );
  const inTable = new Map(left.rows.map((r) => [r.id, r]));
  // The flows' children are judged as the harness's own jobs are (they run the plain body).
  const children = left.rows.filter((r) => r.kind === CHILD_KIND);
  for (const child of children) enqueued.add(child.id);
  report.jobs = enqueued.size + flows.size;
  report.leftRunning = left.rows.filter((r) => r.status === 'running').length;
  const vacuumed = await pool.query<{ n: string }>(
    `SELECT vacuum_count AS n FROM pg_stat_user_tables WHERE relid = 'pgdrain.jobs'::regclass`,
  );
  report.vacuums = Number(vacuumed.rows[0]?.n ?? 0);
  report.leftPending = left.rows.filter((r) => r.status === 'pending').length;
  report.leftWaiting = left.rows.filter((r) => r.status === 'waiting').length;
  for (const id of enqueued) {
    const row = inTable.get(id);
    const done = runs.get(id)?.done ?? 0;
    const revoked = runs.get(id)?.revoked ?? 0;
    report.revoked += revoked;
    if (!row || row.status === 'completed') {
      // Deleted (or kept, completed): it must have finished at least once, in a run the drain did not give up.
      if (done - revoked === 0) report.lost.push(id);
      else {
        report.completed++;
        if (batchItems.has(id)) report.batch.completed++;
      }
      if (done > 1) {
        report.duplicated++;
        const runsOfJob = dones.get(id) ?? [];
        const atTheBudget = runsOfJob.slice(0, -1).some((r) => !r.revoked && doneAtTheBudget(r, started));
        if (atTheBudget) report.doneAtTheBudget++;
        if (done - revoked > 1 && !inFlightAtFault.has(id) && !atTheBudget) {
          report.duplicatedOutsideFaults.push(id);
          const near = (f: { atMs: number }) => runsOfJob.some((r) => Math.abs(r.atMs - f.atMs) < 15_000);
          report.duplicateDetails.push({
            id,
            runs: runsOfJob,
            faults: faultLog.filter(near),
            workerLines: workerLinesAbout(workerOutput, runsOfJob),
          });
        }
      }
    } else if (row.status === 'dead') {
      report.dead++;
      if (batchItems.has(id)) report.batch.dead++;
      if (row.attempts < row.max_attempts) report.lost.push(id); // dead before its rule
    }
  }
  report.batch.items = batchItems.size;

  // Workflows: each run completed with what its steps give; its transactional write is there once;
  // its plain step ran again only when the run was in flight at a fault; one child per run.
  const writes = new Map(
    (
      await pool.query<{ job_id: string; n: number }>(
        `SELECT job_id::text, count(*)::int AS n FROM public.chaos_effects WHERE step = 'write' GROUP BY job_id`,
      )
    ).rows.map((r) => [r.job_id, r.n]),
  );
  report.flows.runs = flows.size;
  report.flows.children = children.length;
  report.flows.childrenCompleted = children.filter((c) => c.status === 'completed').length;
  for (const [id, { n }] of flows) {
    const row = inTable.get(id);
    const result = row?.result as
      | { doubled?: number; approval?: { approved?: boolean }; child?: { squared?: number }; version?: number }
      | undefined;
    if (
      row?.status === 'completed' &&
      result?.doubled === n * 2 &&
      result.approval?.approved === true &&
      result.child?.squared === n * n
    ) {
      report.flows.completed++;
      if (result.version === 2) report.flows.onVersion2++;
      report.completed++;
    } else report.flowsNotCompleted.push(`${id}: ${row ? `${row.status} ${JSON.stringify(row.result)}` : 'gone'}`);
    if ((writes.get(id) ?? 0) !== 1) report.transactionalWritesNotOnce.push(`${id}: ${writes.get(id) ?? 0} rows`);
    const plainRuns = plainSteps.get(id) ?? 0;
    if (plainRuns === 0) report.flowsNotCompleted.push(`${id}: its plain step never reported`);
    if (plainRuns > 1) {
      report.plainStepRepeats++;
      if (!inFlightAtFault.has(id)) report.plainStepsRepeatedOutsideFaults.push(`${id}: ${plainRuns} runs`);
    }
  }
  if (children.length !== flows.size)
    report.flowsNotCompleted.push(`${children.length} children for ${flows.size} runs`);

  // The fair kind: the most runs of each key at once, from their spans (a start at the moment
  // another ended is not an overlap: the next can only be claimed once the last has settled).
  report.fair.jobs = fairJobs.size;
  report.fair.spans = spans.length;
  const byKey = new Map<string, { at: number; delta: 1 | -1 }[]>();
  for (const span of spans) {
    const points = byKey.get(span.key) ?? [];
    points.push({ at: span.startedAt, delta: 1 }, { at: span.endedAt, delta: -1 });
    byKey.set(span.key, points);
  }
  for (const [key, points] of byKey) {
    points.sort((a, b) => a.at - b.at || a.delta - b.delta);
    let now = 0;
    let seen = 0;
    for (const p of points) seen = Math.max(seen, (now += p.delta));
    const limit = FAIR_OVERRIDES[key] ?? FAIR_GROUP_CONCURRENCY;
    report.fair.mostAtOnce[key] = { seen, limit };
    if (seen > limit) report.limitsExceeded.push(`${key}: ${seen} at once, limit ${limit}`);
  }
  const counts = (
    await pool.query(
      `SELECT coalesce(sum(completed), 0)::int AS completed, coalesce(sum(dead), 0)::int AS dead FROM pgdrain.job_counts`,
    )
  ).rows[0];
  report.counters = { completed: counts.completed, dead: counts.dead };
  report.countersMatch = counts.completed === report.completed && counts.dead === report.dead;
  report.finishedBy = Object.fromEntries(doneBy);
  report.elapsedMs = Date.now() - started;

  return report;
}
