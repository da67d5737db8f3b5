// npm run bench [-- --quick] [--json FILE] [--only NAME,NAME] [--server embedded|stock]
// pgdrain side by side with graphile-worker and pg-boss and the article's design, in one run, on
// one PostgreSQL (embedded PostgreSQL 18 with default settings; `--server stock`: Debian's
// PostgreSQL with its defaults, JIT on, test/support/stock-postgres.ts; or DATABASE_URL), each
// system in a fresh database of its own, trivial handlers, every drain checked for exactly-once.
// On a server with JIT, the run ends by reading pg_stat_statements: a statement of pgdrain's that
// was JIT-compiled fails the run.
import { chmod, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../src/db/embedded.ts';
import { explainClaim, maintainHistory } from '../src/queries/index.ts';
import { drizzle } from 'drizzle-orm/node-postgres';
import {
  type BenchSystem,
  RunCounter,
  articleSystem,
  graphileSystem,
  now,
  pgBossSystem,
  pgdrainSystem,
} from './systems.ts';
import { drainWithProcesses } from './sidecar-processes.ts';
import { type ClockFigures, NEON, benchWorkerClock } from './worker-clock.ts';
import { benchWorkerDrainer } from './worker-drainer.ts';
import { drainThroughLongTransaction } from './long-transaction.ts';
import { PLAIN_DRAIN_JOBS, plainDrainInProcess } from './plain-drain.ts';
import { workflowTrial } from './workflows.ts';
import { benchEvents } from './events.ts';
import { benchBatch, benchFair } from './fair.ts';
import { SERIAL_VARIANTS, benchSerial } from './serial.ts';
import { startStockPostgres } from '../test/support/stock-postgres.ts';
import { printTargets, targetRows } from './targets.ts';
import { migrateDatabase } from '../src/db/migrate.ts';

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const jsonFile = args.includes('--json') ? args[args.indexOf('--json') + 1] : undefined;
const only = args.includes('--only') ? args[args.indexOf('--only') + 1]?.split(',') : undefined;
const serverArg = args.includes('--server') ? args[args.indexOf('--server') + 1] : 'embedded';
if (serverArg !== 'embedded' && serverArg !== 'stock') throw new Error(`--server ${serverArg}: embedded or stock`);
const serverKind: 'embedded' | 'stock' = serverArg;

const plan = quick
  ? {
      reps: 1,
      enqueueSizes: [5_000],
      drainSizes: [2_000],
      noAnalyzeSize: 2_000,
      history: 100_000,
      historyDrain: 2_000,
      latencyJobs: 40,
      workerJobs: 500,
      workerReps: 1,
      runNowJobs: 20,
      scaleOut: [1, 2],
      scaleOutJobs: 2_000,
      longTransaction: { beforeS: 3, holdS: 5, afterS: 3, enqueuePerSecond: 2_000 },
    }
  : {
      reps: 3,
      enqueueSizes: [5_000, 50_000],
      drainSizes: [5_000, 50_000],
      noAnalyzeSize: 50_000,
      history: 1_000_000,
      historyDrain: 50_000,
      latencyJobs: 200,
      workerJobs: 5_000,
      workerReps: 5,
      runNowJobs: 200,
      scaleOut: [1, 2, 4, 8],
      scaleOutJobs: 20_000,
      longTransaction: { beforeS: 20, holdS: 60, afterS: 20, enqueuePerSecond: 4_000 },
    };

/** A trial slower than this is not repeated (the slow systems' 50k drains), so a full run stays
 * under 10 minutes on 2 cores. */
const SLOW_TRIAL_MS = 12_000;

interface Figure {
  workload: string;
  system: string;
  unit: string;
  values: number[];
  median: number;
  min: number;
  max: number;
  cpuNodeMs: number[];
  cpuPostgresMs: number[];
  /** A drain's runs: the CPU of the drain alone (not its enqueue, reset or ANALYZE), per job, µs. */
  perJob?: { postgresMicros: number[]; nodeMicros: number[] };
}

const figures: Figure[] = [];
const median = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const percentile = (v: number[], p: number) => {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// CPU of PostgreSQL: the postmaster's own and reaped children's time, plus live children's.
let postmasterPid: number | undefined;
async function postgresCpuMs(): Promise<number> {
  if (!postmasterPid) return Number.NaN;
  const tick = 1000 / 100; // USER_HZ
  let total = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const pid = Number(entry);
    const ppid = Number(fields[1]);
    if (pid === postmasterPid)
      total += (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * tick;
    else if (ppid === postmasterPid) total += (Number(fields[11]) + Number(fields[12])) * tick;
  }
  return total;
}
const nodeCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** The last timed drain's CPU per job (µs), set by timedDrain() and taken by trial(). */
let lastDrainPerJob: { postgresMicros: number; nodeMicros: number } | null = null;
/** What timedDrain() measured since the last take (null: no timed drain ran). */
function takeDrainPerJob(): { postgresMicros: number; nodeMicros: number } | null {
  const taken = lastDrainPerJob;
  lastDrainPerJob = null;
  return taken;
}

/** `drain` of `n` jobs, timed; what it cost PostgreSQL (the postmaster's process tree, from /proc)
 * and this process per job is kept for the trial's figure. Returns the seconds it took. */
async function timedDrain(n: number, drain: () => Promise<void>): Promise<number> {
  const [node0, pg0] = [nodeCpuMs(), await postgresCpuMs()];
  const t0 = now();
  await drain();
  const seconds = (now() - t0) / 1000;
  const [node1, pg1] = [nodeCpuMs(), await postgresCpuMs()];
  lastDrainPerJob = { postgresMicros: ((pg1 - pg0) * 1000) / n, nodeMicros: ((node1 - node0) * 1000) / n };
  return seconds;
}

function record(workload: string, system: string, unit: string, values: number[], cpuNode: number[], cpuPg: number[]) {
  const f: Figure = {
    workload,
    system,
    unit,
    values,
    median: median(values),
    min: Math.min(...values),
    max: Math.max(...values),
    cpuNodeMs: cpuNode,
    cpuPostgresMs: cpuPg,
  };
  figures.push(f);
  return f;
}

async function measure(fn: () => Promise<number>): Promise<{ value: number; node: number; pgCpu: number }> {
  const [n0, p0] = [nodeCpuMs(), await postgresCpuMs()];
  const value = await fn();
  const [n1, p1] = [nodeCpuMs(), await postgresCpuMs()];
  return { value, node: n1 - n0, pgCpu: p1 - p0 };
}

/** Trials slower than SLOW_TRIAL_MS, by system and workload: not repeated in later rounds. */
const slowTrials = new Set<string>();

/** `reps` runs of a workload; a figure the same system and workload already has (an earlier round's)
 * gets these runs added to it. */
async function trial(system: BenchSystem, workload: string, unit: string, reps: number, fn: () => Promise<number>) {
  const key = `${system.name}\u0000${workload}`;
  const earlier = figures.find((f) => f.system === system.name && f.workload === workload);
  if (earlier && slowTrials.has(key)) return earlier;
  const values: number[] = [];
  const cpuNode: number[] = [];
  const cpuPg: number[] = [];
  const done = earlier?.values.length ?? 0;
  const perJob = { postgresMicros: [] as number[], nodeMicros: [] as number[] };
  for (let r = 0; r < reps; r++) {
    const t0 = now();
    takeDrainPerJob();
    const m = await measure(fn);
    const slow = now() - t0 > SLOW_TRIAL_MS;
    values.push(m.value);
    cpuNode.push(m.node);
    cpuPg.push(m.pgCpu);
    const drainedPerJob = takeDrainPerJob();
    if (drainedPerJob) {
      perJob.postgresMicros.push(drainedPerJob.postgresMicros);
      perJob.nodeMicros.push(drainedPerJob.nodeMicros);
    }
    const drained = drainedPerJob
      ? `; the drain per job: postgres ${drainedPerJob.postgresMicros.toFixed(1)} µs, node ${drainedPerJob.nodeMicros.toFixed(1)} µs`
      : '';
    console.log(
      `  ${system.name.padEnd(24)} ${workload.padEnd(34)} run ${done + r + 1}: ${fmt(m.value)} ${unit}  (cpu node ${Math.round(m.node)} ms, postgres ${Math.round(m.pgCpu)} ms${drained})`,
    );
    if (slow) {
      slowTrials.add(key);
      console.log(
        `  ${''.padEnd(24)} ${''.padEnd(34)} (one run took over ${SLOW_TRIAL_MS / 1000} s: not repeated, to stay within the time budget)`,
      );
      break;
    }
  }
  if (!earlier) {
    const f = record(workload, system.name, unit, values, cpuNode, cpuPg);
    if (perJob.postgresMicros.length > 0) f.perJob = perJob;
    return f;
  }
  if (perJob.postgresMicros.length > 0) {
    earlier.perJob ??= { postgresMicros: [], nodeMicros: [] };
    earlier.perJob.postgresMicros.push(...perJob.postgresMicros);
    earlier.perJob.nodeMicros.push(...perJob.nodeMicros);
  }
  earlier.values.push(...values);
  earlier.cpuNodeMs.push(...cpuNode);
  earlier.cpuPostgresMs.push(...cpuPg);
  Object.assign(earlier, {
    median: median(earlier.values),
    min: Math.min(...earlier.values),
    max: Math.max(...earlier.values),
  });
  return earlier;
}

const fmt = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v >= 10 ? v.toFixed(0) : v.toFixed(2));

/** VACUUM/ANALYZE can deadlock with a peer's own maintenance (pg-boss's): try again. */
async function maintain(admin: pg.Pool, statement: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await admin.query(statement);
      return;
    } catch (error) {
      if ((error as { code?: string }).code !== '40P01' || attempt >= 5) throw error;
      await sleep(200 * attempt);
    }
  }
}

async function drainOnce(system: BenchSystem, admin: pg.Pool, n: number, analyze: boolean): Promise<number> {
  await system.reset();
  await system.enqueue(n);
  if (analyze) await maintain(admin, `ANALYZE ${system.table}`);
  const counter = new RunCounter(n);
  const seconds = await timedDrain(n, () => system.drain(counter));
  const [missing, duplicated] = counter.check();
  if (missing || duplicated)
    throw new Error(`${system.name}: ${missing} jobs never ran and ${duplicated} ran twice in a drain of ${n}`);
  return n / seconds;
}

/** A drain right after another drain of as many jobs in the same table, no VACUUM between: the
 * dead tuples a busy queue always carries (autovacuum runs as it would). Only the second is timed. */
async function drainChurned(system: BenchSystem, n: number): Promise<number> {
  await system.reset();
  await system.enqueue(n);
  const first = new RunCounter(n);
  await system.drain(first);
  await system.enqueue(n);
  const counter = new RunCounter(n);
  const seconds = await timedDrain(n, () => system.drain(counter));
  for (const [which, c] of [
    ['first', first],
    ['second', counter],
  ] as const) {
    const [missing, duplicated] = c.check();
    if (missing || duplicated)
      throw new Error(
        `${system.name}: ${missing} jobs never ran and ${duplicated} ran twice in the ${which} churned drain of ${n}`,
      );
  }
  return n / seconds;
}

/** The wake-up latencies measured so far, by system and label: each round adds its jobs. */
const wakeLatencies = new Map<string, { latencies: number[]; node: number; pgCpu: number }>();

/** Wake-up latency of quick jobs enqueued one by one into idle workers, 10 ms apart; with
 * `slowEvery`, every such job in between takes a second instead (only the quick ones' starts
 * are timed). Records p50, p95 and p99 as `${label} pNN`, over every round's jobs so far. */
async function wakeUps(system: BenchSystem, label: string, slowEvery: number, reps: number): Promise<void> {
  const key = `${system.name}\u0000${label}`;
  const so = wakeLatencies.get(key) ?? { latencies: [], node: 0, pgCpu: 0 };
  wakeLatencies.set(key, so);
  const { latencies } = so;
  const isSlow = (seq: number) => slowEvery > 0 && seq % slowEvery === slowEvery - 1;
  const m = await measure(async () => {
    for (let r = 0; r < reps; r++) {
      const started = new Map<number, number>();
      const sent = new Map<number, number>();
      const workers = await system.idle((seq) => started.set(seq, now()));
      await sleep(200);
      for (let seq = 0; seq < plan.latencyJobs; seq++) {
        sent.set(seq, now());
        await workers.enqueueOne(seq, isSlow(seq) ? 1_000 : 0);
        await sleep(10);
      }
      const quick = [...sent.keys()].filter((seq) => !isSlow(seq));
      // The article's four workers run slow jobs one after another: theirs take longest.
      const deadline = now() + 40_000;
      while (quick.some((seq) => !started.has(seq)) && now() < deadline) await sleep(10);
      const missing = quick.filter((seq) => !started.has(seq)).length;
      // Slow ones still running are given up by the stop: they are not timed.
      await workers.stop();
      if (missing > 0)
        throw new Error(`${system.name}: ${missing} of ${quick.length} quick jobs never started (${label})`);
      for (const seq of quick) latencies.push(started.get(seq)! - sent.get(seq)!);
    }
    return 0;
  });
  so.node += m.node;
  so.pgCpu += m.pgCpu;
  for (const [name, p] of [
    ['p50', 50],
    ['p95', 95],
    ['p99', 99],
  ] as const) {
    // Over every round's jobs so far: an earlier round's figure is replaced.
    const workload = `${label} ${name}`;
    const at = figures.findIndex((f) => f.system === system.name && f.workload === workload);
    if (at >= 0) figures.splice(at, 1);
    const f = record(workload, system.name, 'ms', [percentile(latencies, p)], [so.node], [so.pgCpu]);
    console.log(
      `  ${system.name.padEnd(24)} ${f.workload.padEnd(34)} ${f.median.toFixed(2)} ms over ${latencies.length} jobs`,
    );
  }
}

/** One round of a system's workloads, one run of each: the rounds take turns between the systems
 * (main()), so that a machine that slows down for a while slows every system alike. */
async function benchSystem(system: BenchSystem, url: string, round: number) {
  console.log(`\n${system.name} ${system.version}, round ${round + 1} of ${plan.reps}`);
  await system.install(url);
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => {});
  try {
    for (const n of plan.enqueueSizes) {
      await trial(system, `bulk enqueue ${n / 1000}k`, 'jobs/s', 1, async () => {
        await system.reset();
        const t0 = now();
        await system.enqueue(n);
        return n / ((now() - t0) / 1000);
      });
    }
    // One drain not timed, for every system alike and in every round (a new database each): V8
    // compiles a system's drain code during its first drain, which would otherwise be timed for
    // pgdrain (which runs first) but not for graphile-worker tuned (which runs after graphile-worker
    // default, whose drains warmed the same code).
    await drainOnce(system, admin, plan.drainSizes[0]!, true);
    for (const n of plan.drainSizes) {
      await trial(system, `drain ${n / 1000}k (after ANALYZE)`, 'jobs/s', 1, () => drainOnce(system, admin, n, true));
    }
    await trial(system, `drain ${plan.noAnalyzeSize / 1000}k (no ANALYZE)`, 'jobs/s', 1, () =>
      drainOnce(system, admin, plan.noAnalyzeSize, false),
    );
    await trial(system, `drain ${plan.noAnalyzeSize / 1000}k (churned)`, 'jobs/s', 1, () =>
      drainChurned(system, plan.noAnalyzeSize),
    );
    // Beside pgdrain's burst into an idle `pgdrain start` (the processes section below, same name).
    if (system.burst) {
      const burst = system.burst;
      await trial(system, `drain ${plan.noAnalyzeSize / 1000}k burst, one transaction, idle process`, 'jobs/s', 1, () =>
        burst(plan.noAnalyzeSize),
      );
    }

    await system.reset();
    // Idle workers in a steady state: what autovacuum leaves after the drains above.
    await maintain(admin, `VACUUM ANALYZE ${system.table}`);
    await wakeUps(system, 'wake-up latency', 0, 1);
    // The same quick jobs with every fifth job taking 1 s (80% quick, 20% slow): slow handlers
    // in some slots must not delay the quick jobs' start.
    await system.reset();
    await wakeUps(system, 'wake-up, 1 in 5 jobs takes 1 s,', 5, 1);

    const deadRows = `drain ${plan.historyDrain / 1000}k, ${plan.history / 1e6}M dead rows`;
    if (slowTrials.has(`${system.name}\u0000${deadRows}`)) return;
    await system.reset();
    await system.seedHistory(plan.history);
    await maintain(admin, `VACUUM ANALYZE ${system.table}`);
    await trial(system, deadRows, 'jobs/s', 1, () => drainOnce(system, admin, plan.historyDrain, true));
  } finally {
    await admin.end();
    await system.close();
  }
}

async function main() {
  const started = now();
  let stopServer = async () => {};
  let adminUrl = process.env.DATABASE_URL;
  let dir: string | undefined;
  if (!adminUrl && serverKind === 'stock') {
    // Every statement tracked (inside functions too), for the JIT check at the end: all systems pay it.
    const server = await startStockPostgres({ max_connections: 200, 'pg_stat_statements.track': 'all' });
    adminUrl = server.url;
    postmasterPid = server.pid;
    stopServer = server.stop;
  } else if (!adminUrl) {
    dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-bench-'));
    await chmod(dir, 0o755);
    // pg_stat_statements loaded but tracking nothing, but where a workload turns it on for its own
    // database (the sidecar processes' PostgreSQL time per job).
    const server = await startEmbeddedPostgres({
      dataDir: path.join(dir, 'data'),
      password: 'bench',
      settings: {
        max_connections: 200,
        shared_preload_libraries: 'pg_stat_statements',
        'pg_stat_statements.track': 'none',
      },
    });
    adminUrl = server.url;
    postmasterPid = server.pid;
    stopServer = server.stop;
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const settings = Object.fromEntries(
    (
      await admin.query(
        `SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'shared_buffers', 'fsync', 'synchronous_commit', 'max_connections', 'work_mem', 'jit')`,
      )
    ).rows.map((r) => [r.name, r.setting]),
  );
  const machine = {
    cores: os.cpus().length,
    cpu: os.cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    date: new Date().toISOString().slice(0, 10),
  };
  console.log(
    `pgdrain benchmark${quick ? ' (--quick)' : ''}: ${machine.cores} cores, ${machine.cpu}, PostgreSQL ${settings.server_version}, Node ${machine.node}`,
  );

  const systems = [
    pgdrainSystem(),
    graphileSystem(false),
    graphileSystem(true),
    pgBossSystem(),
    articleSystem(),
  ].filter((s) => !only || only.some((o) => s.name.startsWith(o)));
  const versions: Record<string, string> = {};
  /** pgdrain's databases of this run, for the JIT check (their statistics outlive them). */
  const pgdrainDatabases: number[] = [];
  const peerDatabase = /^bench_(graphile|pg_boss|article|wf_dbos)/;
  /** A new empty database on the benchmark's server (dropped first if a past run left it). */
  const freshDatabase = async (name: string): Promise<string> => {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
    if (!peerDatabase.test(name))
      pgdrainDatabases.push(
        Number((await admin.query(`SELECT oid FROM pg_database WHERE datname = $1`, [name])).rows[0].oid),
      );
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    return url.toString();
  };
  // Round by round: each system's workloads once, then the next system's, plan.reps times over,
  // each round on a new database; a row's figure is the median of its rounds.
  for (let round = 0; round < plan.reps; round++) {
    for (const system of systems) {
      const name = `bench_${system.name.replace(/\W+/g, '_').toLowerCase()}`;
      versions[system.name] = system.version;
      await benchSystem(system, await freshDatabase(name), round);
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    }
  }

  // pgdrain's claim plan on a freshly bulk-loaded table with no statistics at all.
  if (!only || only.includes('pgdrain')) {
    const url = await freshDatabase('bench_plan');
    const plan = pgdrainSystem();
    await plan.install(url);
    await plan.enqueue(50_000);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const text = await explainClaim(drizzle({ client: pool }) as never, {
      batchSize: 20,
      lockToken: 'plan:1',
      kinds: ['bench'],
    });
    console.log(`\npgdrain claim plan, 50k jobs just loaded, no ANALYZE:\n${text.replace(/^/gm, '  ')}`);
    await pool.end();
    await plan.close();
    await admin.query('DROP DATABASE bench_plan WITH (FORCE)');
  }

  // The plain drain, every change's budget (bench/plain-drain.ts): the same way every run, each
  // drain in a process of its own; `npm run bench:plain -- --against REV` pairs it with another commit.
  if (!only || only.includes('pgdrain') || only.includes('plain')) {
    const n = quick ? 5_000 : PLAIN_DRAIN_JOBS;
    const url = await freshDatabase('bench_plain');
    console.log(
      `\nplain drain ${n / 1000}k (no-op kind, no limits, nothing kept or traced, counts on; VACUUM and ANALYZE before each)`,
    );
    const values: number[] = [];
    for (let r = 0; r < (quick ? 1 : 6); r++) {
      values.push(await plainDrainInProcess(path.resolve(import.meta.dirname, '..'), url, n));
      console.log(`  pgdrain rep ${r + 1}: ${fmt(values.at(-1)!)} jobs/s`);
    }
    record(`plain drain ${n / 1000}k (the budget)`, 'pgdrain', 'jobs/s', values, [], []);
    await admin.query('DROP DATABASE bench_plain WITH (FORCE)');
  }

  // What job_counts costs, and what priorities cost: the same drain two ways, alternating on one
  // database so drift in the machine's speed falls on both alike.
  const paired: { label: string; a: string; b: string; values: [number[], number[]] }[] = [];
  if (!only || only.includes('pgdrain')) {
    const n = plan.drainSizes.at(-1)!;
    const pairs = quick ? 1 : 6;
    paired.push(
      await drainPairs(
        'counts',
        `drain ${n / 1000}k with job_counts on and off`,
        pgdrainSystem(),
        pgdrainSystem({ recordCounts: false }),
        n,
        pairs,
      ),
    );
    paired.push(
      await drainPairs(
        'priorities',
        `drain ${n / 1000}k, jobs at 21 priorities and all at priority 0`,
        pgdrainSystem({ priorities: true }),
        pgdrainSystem(),
        n,
        pairs,
      ),
    );
    record(`drain ${n / 1000}k, counts on`, 'pgdrain', 'jobs/s', paired[0]!.values[0], [], []);
    record(`drain ${n / 1000}k, counts off`, 'pgdrain', 'jobs/s', paired[0]!.values[1], [], []);
    record(`drain ${n / 1000}k, 21 priorities`, 'pgdrain', 'jobs/s', paired[1]!.values[0], [], []);
    record(`drain ${n / 1000}k, one priority`, 'pgdrain', 'jobs/s', paired[1]!.values[1], [], []);
    paired.push(
      await drainPairs(
        'limits',
        `drain ${n / 1000}k of an unlimited kind, with limited kinds registered beside it and without`,
        pgdrainSystem({ unusedLimits: true }),
        pgdrainSystem(),
        n,
        pairs,
      ),
    );
    record(`drain ${n / 1000}k, limited kinds beside it`, 'pgdrain', 'jobs/s', paired[2]!.values[0], [], []);
    record(`drain ${n / 1000}k, no limits anywhere`, 'pgdrain', 'jobs/s', paired[2]!.values[1], [], []);
    // A history: each completed job stays, with its result, instead of being deleted.
    paired.push(
      await drainPairs(
        'results',
        `drain ${n / 1000}k, results kept and deleted at once`,
        pgdrainSystem({ keepResults: true }),
        pgdrainSystem(),
        n,
        pairs,
      ),
    );
    record(`drain ${n / 1000}k, results kept`, 'pgdrain', 'jobs/s', paired[3]!.values[0], [], []);
    record(`drain ${n / 1000}k, results deleted at once`, 'pgdrain', 'jobs/s', paired[3]!.values[1], [], []);
    // Pruning the history: a day of kept jobs whose keeps are over, dropped whole (maintainHistory).
    {
      const rows = quick ? 100_000 : 1_000_000;
      const url = await freshDatabase('bench_prune');
      const system = pgdrainSystem({ keepResults: true });
      await system.install(url);
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      await pool.query(
        `CREATE TABLE pgdrain.job_history_p20200101 PARTITION OF pgdrain.job_history FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00')`,
      );
      await pool.query(
        `INSERT INTO pgdrain.job_history (id, kind, payload, status, attempts, finished_at, keep_until, result)
         SELECT i, 'bench', jsonb_build_object('i', i), 'completed', 1, '2020-01-01 00:00+00', '2020-01-01 00:00+00'::timestamptz + make_interval(secs => i % 86400), '{"ran": true}'
           FROM generate_series(1, $1::int) AS i`,
        [rows],
      );
      const t0 = now();
      const upkeep = await maintainHistory(drizzle({ client: pool }) as never);
      const ms = now() - t0;
      if (upkeep.dropped !== 1) throw new Error(`prune: expected one day dropped, got ${JSON.stringify(upkeep)}`);
      console.log(`\npruning a day of ${rows / 1e6}M kept jobs (the partition dropped whole): ${ms.toFixed(0)} ms`);
      record(`prune a day of ${rows / 1e6}M kept jobs`, 'pgdrain', 'ms', [ms], [], []);
      await pool.end();
      await system.close();
      await admin.query('DROP DATABASE bench_prune WITH (FORCE)');
    }
    // Tracing: every claim and every handler run a span, batched to an exporter, against no API at all.
    paired.push(
      await drainPairs(
        'tracing',
        `drain ${n / 1000}k with an OpenTelemetry tracer provider registered and without`,
        pgdrainSystem({ tracing: true }),
        pgdrainSystem(),
        n,
        pairs,
      ),
    );
    record(`drain ${n / 1000}k, traced (OpenTelemetry)`, 'pgdrain', 'jobs/s', paired[4]!.values[0], [], []);
    record(`drain ${n / 1000}k, not traced`, 'pgdrain', 'jobs/s', paired[4]!.values[1], [], []);
    // The limits themselves: every claim of the kind under its lock, counting what it holds.
    for (const variant of [{ globalConcurrency: 50 }, { groups: 100 }]) {
      const system = pgdrainSystem(variant);
      const name = `bench_${variant.groups ? 'groups' : 'global'}`;
      const url = await freshDatabase(name);
      await system.install(url);
      const limitedAdmin = new pg.Pool({ connectionString: url, max: 1 });
      console.log(`\n${system.name}`);
      const f = await trial(system, `drain ${n / 1000}k`, 'jobs/s', plan.reps, () =>
        drainOnce(system, limitedAdmin, n, true),
      );
      figures.pop();
      const limited = record(
        variant.groups
          ? `drain ${n / 1000}k, ${variant.groups} groups (1 at a time each)`
          : `drain ${n / 1000}k, globalConcurrency ${variant.globalConcurrency}`,
        'pgdrain',
        'jobs/s',
        f.values,
        f.cpuNodeMs,
        f.cpuPostgresMs,
      );
      if (f.perJob) limited.perJob = f.perJob;
      await limitedAdmin.end();
      await system.close();
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
    }
  }

  /** Drains of `n` by two variants in ABBA order on one fresh database, a VACUUM before each
   * (otherwise whichever goes first in every pair gets the table with fewer dead tuples in it). */
  async function drainPairs(label: string, title: string, a: BenchSystem, b: BenchSystem, n: number, pairs: number) {
    const url = await freshDatabase(`bench_${label}`);
    await a.install(url);
    await b.install(url);
    const pairAdmin = new pg.Pool({ connectionString: url, max: 1 });
    pairAdmin.on('error', () => {});
    console.log(`\nthe cost of ${label}: ${title}, ${pairs} alternating pairs`);
    const values: [number[], number[]] = [[], []];
    for (let r = 0; r < pairs; r++) {
      const pair = [
        [a, values[0]],
        [b, values[1]],
      ] as const;
      for (const [system, into] of r % 2 === 0 ? pair : [...pair].reverse()) {
        await system.reset();
        await maintain(pairAdmin, 'VACUUM pgdrain.jobs');
        const m = await measure(() => drainOnce(system, pairAdmin, n, true));
        into.push(m.value);
        console.log(
          `  ${system.name.padEnd(24)} pair ${r + 1}/${pairs}: ${fmt(m.value)} jobs/s  (cpu node ${Math.round(m.node)} ms, postgres ${Math.round(m.pgCpu)} ms)`,
        );
      }
    }
    await pairAdmin.end();
    await a.close();
    await b.close();
    await admin.query(`DROP DATABASE bench_${label} WITH (FORCE)`);
    return { label, a: a.name, b: b.name, values };
  }

  // Several sidecar processes on one database against one (on 2 cores: contention, not scale).
  if (!only || only.includes('pgdrain')) {
    console.log('\npgdrain sidecar processes (`pgdrain start`, default settings) on one backlog');
    const n = plan.noAnalyzeSize;
    const variants = [
      { label: `drain ${n / 1000}k, 1 process`, processes: 1, options: {} },
      { label: `drain ${n / 1000}k, 4 processes`, processes: 4, options: {} },
      // An idle queue (its table analyzed empty, its claims planned then) meets a burst in one transaction.
      { label: `drain ${n / 1000}k burst, one transaction, idle process`, processes: 1, options: { burst: true } },
      {
        label: `drain ${n / 1000}k burst, ANALYZE before the wake`,
        processes: 1,
        options: { burst: true, analyzeBeforeWake: true },
      },
    ];
    for (const variant of variants) {
      const values: number[] = [];
      const pgMicros: number[] = [];
      const pgCpuMicros: number[] = [];
      for (let r = 0; r < plan.reps; r++) {
        const url = await freshDatabase('bench_processes');
        const result = await drainWithProcesses(url, variant.processes, n, { ...variant.options, postgresCpuMs });
        await admin.query('DROP DATABASE bench_processes WITH (FORCE)');
        if (result.missing || result.duplicated)
          throw new Error(`${variant.label}: ${result.missing} jobs never ran and ${result.duplicated} ran twice`);
        values.push(result.jobsPerSecond);
        if (result.postgresMicrosPerJob !== null) pgMicros.push(result.postgresMicrosPerJob);
        if (result.postgresCpuMicrosPerJob !== null) pgCpuMicros.push(result.postgresCpuMicrosPerJob);
        const pgTime =
          (result.postgresMicrosPerJob === null
            ? ''
            : `, PostgreSQL ${result.postgresMicrosPerJob.toFixed(1)} µs per job`) +
          (result.postgresCpuMicrosPerJob === null ? '' : ` (CPU ${result.postgresCpuMicrosPerJob.toFixed(1)} µs)`);
        console.log(
          `  ${variant.label}, rep ${r + 1}/${plan.reps}: ${fmt(result.jobsPerSecond)} jobs/s${pgTime}, every job exactly once`,
        );
      }
      record(variant.label, 'pgdrain', 'jobs/s', values, [], []);
      if (pgMicros.length > 0) record(`${variant.label}: PostgreSQL time per job`, 'pgdrain', 'µs', pgMicros, [], []);
      if (pgCpuMicros.length > 0)
        record(`${variant.label}: PostgreSQL CPU per job`, 'pgdrain', 'µs', pgCpuMicros, [], []);
    }
  }

  // Issue 71 §3, drainers that scale out: 1, 2, 4 and 8 `pgdrain start` processes on one backlog,
  // each of small concurrency with jobs that take a few milliseconds, so each process sets its own
  // pace and eight stay below what the machine's two cores can drain: what grows with their number
  // is what a job costs PostgreSQL, not the cores spread thinner.
  if (!only || only.includes('pgdrain') || only.includes('scale-out')) {
    const n = plan.scaleOutJobs;
    const [concurrency, jobMs] = [4, 2];
    console.log(
      `\npgdrain scale-out: N \`pgdrain start\` processes, CONCURRENCY=${concurrency} each, jobs of ${jobMs} ms, one ${n / 1000}k backlog`,
    );
    for (const processes of plan.scaleOut) {
      const label = `scale-out ${n / 1000}k, ${processes} process${processes === 1 ? '' : 'es'}`;
      const figures = { jobs: [] as number[], cpu: [] as number[], waits: [] as number[], claims: [] as number[] };
      // The reps measure the drain; one more samples lock waits (its sampler's queries are not the
      // drain's work, so that rep's CPU is not counted).
      for (let r = 0; r <= plan.reps; r++) {
        const sampling = r === plan.reps;
        const url = await freshDatabase('bench_scale_out');
        const result = await drainWithProcesses(url, processes, n, {
          postgresCpuMs,
          sampleLockWaits: sampling,
          env: { CONCURRENCY: String(concurrency), BENCH_JOB_MS: String(jobMs) },
        });
        await admin.query('DROP DATABASE bench_scale_out WITH (FORCE)');
        if (result.missing || result.duplicated)
          throw new Error(`${label}: ${result.missing} jobs never ran and ${result.duplicated} ran twice`);
        if (sampling) {
          if (result.lockWaitMsPerClaim !== null) figures.waits.push(result.lockWaitMsPerClaim);
          console.log(
            `  ${label}, lock waits: ${result.lockWaitMsPerClaim?.toFixed(3) ?? '?'} ms per claim (sampled every ` +
              `10 ms), ${result.claims ?? '?'} claims, every job exactly once`,
          );
          continue;
        }
        figures.jobs.push(result.jobsPerSecond);
        if (result.postgresCpuMicrosPerJob !== null) figures.cpu.push(result.postgresCpuMicrosPerJob);
        if (result.claims !== null) figures.claims.push((result.claims * 1000) / n);
        console.log(
          `  ${label}, rep ${r + 1}/${plan.reps}: ${fmt(result.jobsPerSecond)} jobs/s, PostgreSQL CPU ` +
            `${result.postgresCpuMicrosPerJob?.toFixed(1) ?? '?'} µs per job, ${result.claims ?? '?'} claims, every job exactly once`,
        );
        for (const st of result.topStatements)
          console.log(
            `      ${st.microsPerJob.toFixed(1).padStart(6)} µs/job ${st.callsPerJob.toFixed(3)} calls/job  ${st.query}`,
          );
      }
      record(label, 'pgdrain', 'jobs/s', figures.jobs, [], []);
      if (figures.cpu.length > 0) record(`${label}: PostgreSQL CPU per job`, 'pgdrain', 'µs', figures.cpu, [], []);
      if (figures.waits.length > 0) record(`${label}: lock waits per claim`, 'pgdrain', 'ms', figures.waits, [], []);
      if (figures.claims.length > 0)
        record(`${label}: claims per 1,000 jobs`, 'pgdrain', 'claims', figures.claims, [], []);
    }
  }

  // A transaction held open elsewhere during a steady load: what it does to the drain and the table.
  if (!only || only.includes('pgdrain') || only.includes('long-transaction')) {
    const lt = plan.longTransaction;
    console.log(
      `\npgdrain under a steady ${lt.enqueuePerSecond} jobs/s with a REPEATABLE READ transaction held open for ${lt.holdS} s in the middle`,
    );
    const url = await freshDatabase('bench_long_tx');
    const phases = await drainThroughLongTransaction(url, lt, (line) => console.log(line));
    await admin.query('DROP DATABASE bench_long_tx WITH (FORCE)');
    for (const p of phases) {
      record(`long transaction, ${p.phase}: drained`, 'pgdrain', 'jobs/s', [p.drainedPerSecond], [], []);
      record(`long transaction, ${p.phase}: dead tuples`, 'pgdrain', 'rows', [p.deadTuplesAtEnd], [], []);
      record(`long transaction, ${p.phase}: largest backlog`, 'pgdrain', 'jobs', [p.maxBacklog], [], []);
    }
  }

  const workers: { driver: 'neon' | 'hyperdrive'; figures: Awaited<ReturnType<typeof benchWorkerDrainer>> }[] = [];
  if (!only || only.includes('worker')) {
    for (const driver of ['neon', 'hyperdrive'] as const) {
      const url = await freshDatabase('bench_worker');
      console.log(
        driver === 'neon'
          ? '\nthe Worker drainer (wrangler dev, Neon driver through the local WebSocket proxy)'
          : '\nthe Worker drainer (wrangler dev, node-postgres through a local Hyperdrive binding)',
      );
      const result = await benchWorkerDrainer(url, {
        driver,
        jobs: plan.workerJobs,
        reps: plan.workerReps,
        runNowJobs: plan.runNowJobs,
        rttsMs: [0, 10, 30],
        enqueueRequests: plan.runNowJobs,
      });
      workers.push({ driver, figures: result });
      // Named workloads for --json: system `pgdrain worker` (Neon) and `pgdrain worker (Hyperdrive)`.
      const system = driver === 'neon' ? 'pgdrain worker' : 'pgdrain worker (Hyperdrive)';
      record(
        'worker drain, first scheduled() (cold JIT), 0 ms RTT',
        system,
        'jobs/s',
        [result.cold.jobsPerSecond],
        [],
        [],
      );
      record(
        'worker CPU per 1,000 jobs, first scheduled() (cold JIT), 0 ms RTT',
        system,
        'ms',
        [result.cold.cpuMsPer1000],
        [],
        [],
      );
      for (const rtt of [0, 10, 30]) {
        const drains = result.drains.filter((d) => d.rttMs === rtt);
        if (drains.length > 0) {
          record(
            `worker drain, ${rtt} ms RTT`,
            system,
            'jobs/s',
            drains.map((d) => d.jobsPerSecond),
            [],
            [],
          );
          record(
            `worker CPU per 1,000 jobs, ${rtt} ms RTT`,
            system,
            'ms',
            drains.map((d) => d.cpuMsPer1000),
            [],
            [],
          );
        }
      }
      if (result.enqueueP50At10MsRtt !== undefined)
        record('worker enqueue p50, 10 ms RTT', system, 'ms', [result.enqueueP50At10MsRtt], [], []);
      if (result.runNow) {
        record('worker runNow p50, POST → handler', system, 'ms', [result.runNow.p50Ms], [], []);
        record('worker runNow p99, POST → handler', system, 'ms', [result.runNow.p99Ms], [], []);
      }
      await admin.query('DROP DATABASE bench_worker WITH (FORCE)');
    }
  }
  // The queue's clock (bench/worker-clock.ts): what an idle Worker costs its database, with and
  // without it, and how late delayed jobs start with no cron tick.
  let clock: ClockFigures | undefined;
  if (!only || only.includes('worker') || only.includes('clock')) {
    const url = await freshDatabase('bench_clock');
    console.log("\nthe queue's clock (wrangler dev, Neon path): idle cron invocations, the backstop, delayed jobs");
    clock = await benchWorkerClock(url, { crons: quick ? 5 : 20, delayedJobs: quick ? 10 : 60 });
    record(
      'worker idle: statements per cron invocation, with the clock / without',
      'pgdrain worker',
      'statements',
      [clock.statementsPerIdleCron.withClock],
      [],
      [],
    );
    record(
      'worker idle: statements per cron invocation, with the clock / without',
      'pgdrain worker (no clock)',
      'statements',
      [clock.statementsPerIdleCron.withoutClock],
      [],
      [],
    );
    record(
      'worker idle: statements per hour (* * * * *, BACKSTOP_POLL_SECONDS 3600)',
      'pgdrain worker',
      'statements',
      [clock.statementsPerIdleHour.withClock],
      [],
      [],
    );
    record(
      'worker idle: statements per hour (* * * * *, BACKSTOP_POLL_SECONDS 3600)',
      'pgdrain worker (no clock)',
      'statements',
      [clock.statementsPerIdleHour.withoutClock],
      [],
      [],
    );
    record(
      'worker delayed jobs (API, 1-3 s): start after run_at p50',
      'pgdrain worker',
      'ms',
      [clock.delayed.p50Ms],
      [],
      [],
    );
    record(
      'worker delayed jobs (API, 1-3 s): start after run_at p99',
      'pgdrain worker',
      'ms',
      [clock.delayed.p99Ms],
      [],
      [],
    );
    await admin.query('DROP DATABASE bench_clock WITH (FORCE)');
  }
  // Fair claims (bench/fair.ts): their cost with many keys, against plain claims of the same jobs.
  if (!only || only.includes('fair')) {
    console.log('\nfair claims (fair: true) against plain claims of the same no-op jobs, one drain, concurrency 50');
    for (const keys of quick ? [10, 1_000] : [10, 1_000, 100_000]) {
      const jobs = quick ? 5_000 : Math.max(20_000, keys);
      const url = await freshDatabase('bench_fair');
      await migrateDatabase(url);
      const f = await benchFair(url, keys, jobs);
      console.log(
        `  ${keys} keys, ${jobs} jobs: fair ${fmt(f.fairPerSecond)} jobs/s, plain ${fmt(f.plainPerSecond)} jobs/s`,
      );
      record(`fair claims, ${fmt(keys)} keys (${fmt(jobs)} jobs)`, 'pgdrain fair', 'jobs/s', [f.fairPerSecond], [], []);
      record(
        `fair claims, ${fmt(keys)} keys (${fmt(jobs)} jobs)`,
        'pgdrain plain',
        'jobs/s',
        [f.plainPerSecond],
        [],
        [],
      );
      await admin.query('DROP DATABASE IF EXISTS bench_fair WITH (FORCE)');
    }
    const jobs = quick ? 5_000 : 50_000;
    const url = await freshDatabase('bench_batch');
    await migrateDatabase(url);
    const b = await benchBatch(url, jobs);
    console.log(
      `  a batch kind (100 per call), ${jobs} no-op jobs: ${fmt(b.batchPerSecond)} jobs/s; one per call: ${fmt(b.singlePerSecond)} jobs/s`,
    );
    record(`batch kind, 100 per call (${fmt(jobs)} no-op jobs)`, 'pgdrain batch', 'jobs/s', [b.batchPerSecond], [], []);
    record(
      `batch kind, 100 per call (${fmt(jobs)} no-op jobs)`,
      'pgdrain plain',
      'jobs/s',
      [b.singlePerSecond],
      [],
      [],
    );
    await admin.query('DROP DATABASE IF EXISTS bench_batch WITH (FORCE)');
  }

  // Durable workflows (bench/workflows.ts): pgdrain and DBOS Transact, each in a process of its own.
  if (!only || only.includes('workflows')) {
    const runs = quick ? 500 : 10_000;
    console.log(
      `\ndurable workflows: ${runs} runs of three steps and a 1 s sleep (each system in a process of its own, a database of its own)`,
    );
    // DBOS twice: on a queue of the same concurrency, and with startWorkflow alone (its fastest).
    for (const [system, mode] of [
      ['pgdrain', ''],
      ['dbos', 'queue'],
      ['dbos', 'direct'],
    ] as const) {
      const url = await freshDatabase(`bench_wf_${system}`);
      if (system === 'pgdrain') await migrateDatabase(url);
      try {
        const trialResult = await workflowTrial(system, url, runs, 1, postgresCpuMs, mode);
        const name = system === 'pgdrain' ? 'pgdrain' : mode === 'queue' ? 'DBOS Transact' : 'DBOS Transact, no queue';
        console.log(
          `  ${name.padEnd(24)} ${fmt(trialResult.runsPerSecond)} runs/s (${trialResult.seconds.toFixed(1)} s; postgres ${Math.round(trialResult.postgresCpuMs ?? 0)} ms)`,
        );
        record(
          `workflows: ${runs / 1000}k runs, 3 steps + 1 s sleep`,
          name,
          'runs/s',
          [trialResult.runsPerSecond],
          [],
          [trialResult.postgresCpuMs ?? Number.NaN],
        );
        record(
          `workflows: PostgreSQL CPU per step (3 steps + the sleep)`,
          name,
          'µs',
          [((trialResult.postgresCpuMs ?? Number.NaN) * 1000) / (runs * 4)],
          [],
          [],
        );
      } catch (error) {
        console.log(`  ${system}: failed: ${(error as Error).message.split('\n').slice(0, 5).join(' | ')}`);
      }
      await admin.query(`DROP DATABASE IF EXISTS bench_wf_${system} WITH (FORCE)`);
    }
    // A step's cost next to a plain job's: the same runs without the sleep (three steps each).
    const url = await freshDatabase('bench_wf_steps');
    await migrateDatabase(url);
    const steps = await workflowTrial('pgdrain', url, runs, 0, postgresCpuMs);
    record(
      'workflows: time per step, 3 steps, no sleep',
      'pgdrain',
      'µs',
      [(steps.seconds * 1e6) / (runs * 3)],
      [],
      [],
    );
    record(
      'workflows: PostgreSQL CPU per step, 3 steps, no sleep',
      'pgdrain',
      'µs',
      [((steps.postgresCpuMs ?? Number.NaN) * 1000) / (runs * 3)],
      [],
      [],
    );
    console.log(
      `  pgdrain without the sleep: ${fmt(steps.runsPerSecond)} runs/s, ${((steps.seconds * 1e6) / (runs * 3)).toFixed(0)} µs per step, postgres ${(((steps.postgresCpuMs ?? 0) * 1000) / (runs * 3)).toFixed(0)} µs per step`,
    );
    await admin.query('DROP DATABASE IF EXISTS bench_wf_steps WITH (FORCE)');
    // Fan-out: each run invokes 20 children at once (Promise.all over step.invoke) and returns.
    const fanRuns = quick ? 50 : 500;
    const fanUrl = await freshDatabase('bench_wf_fanout');
    await migrateDatabase(fanUrl);
    const fan = await workflowTrial('pgdrain', fanUrl, fanRuns, 0, postgresCpuMs, 'fanout=20');
    record(
      `workflows: ${fanRuns} runs × 20 children at once`,
      'pgdrain',
      'runs/s',
      [fan.runsPerSecond],
      [],
      [fan.postgresCpuMs ?? Number.NaN],
    );
    record(`workflows: 20-way fan-out, children per second`, 'pgdrain', 'jobs/s', [fan.runsPerSecond * 20], [], []);
    console.log(
      `  pgdrain, ${fanRuns} runs of 20 children each at once: ${fmt(fan.runsPerSecond)} runs/s, ${fmt(fan.runsPerSecond * 20)} children/s`,
    );
    await admin.query('DROP DATABASE IF EXISTS bench_wf_fanout WITH (FORCE)');
  }

  // Events that start work (bench/events.ts): 0, 1 and 10 kinds subscribed.
  if (!only || only.includes('pgdrain') || only.includes('events')) {
    const events = quick ? 1_000 : 10_000;
    const url = await freshDatabase('bench_events');
    await migrateDatabase(url);
    console.log(`\nevents: ${fmt(events)} sent through pgdrain.send_event(), 4 clients, one statement each`);
    for (const subscribers of [0, 1, 10]) {
      const trial = await benchEvents(url, subscribers, events);
      console.log(
        `  ${String(subscribers).padStart(2)} subscribers: ${fmt(trial.eventsPerSecond)} events/s, ${fmt(trial.jobs)} jobs started`,
      );
      record(`events/s, ${subscribers} subscribers`, 'pgdrain', 'events/s', [trial.eventsPerSecond], [], []);
    }
    await admin.query('DROP DATABASE IF EXISTS bench_events WITH (FORCE)');
  }

  // Kinds limited to one job at a time (bench/serial.ts): the slot handed on at each settlement.
  if (!only || only.includes('pgdrain') || only.includes('serial')) {
    const jobs = quick ? 20 : 40;
    console.log(
      `\nserial kinds: ${jobs} jobs of 10 ms, one at a time, poll 30 s: the gap between one job's end and the next one's start`,
    );
    for (const variant of Object.keys(SERIAL_VARIANTS) as (keyof typeof SERIAL_VARIANTS)[]) {
      const url = await freshDatabase('bench_serial');
      await migrateDatabase(url);
      const f = await benchSerial(url, variant, jobs);
      console.log(
        `  ${variant.padEnd(36)} ${f.seconds.toFixed(2)} s, gap p50 ${f.gapP50Ms.toFixed(1)} ms, p99 ${f.gapP99Ms.toFixed(1)} ms`,
      );
      record(`serial kind (${variant}): gap p50`, 'pgdrain', 'ms', [f.gapP50Ms], [], []);
      record(`serial kind (${variant}): gap p99`, 'pgdrain', 'ms', [f.gapP99Ms], [], []);
      await admin.query('DROP DATABASE IF EXISTS bench_serial WITH (FORCE)');
    }
  }

  // Wake-ups at scale: many runs asleep at once, each pending until its sleep ends, claimed then.
  if (!only || only.includes('workflows') || only.includes('wake')) {
    const runs = quick ? 1_000 : 5_000;
    const url = await freshDatabase('bench_wf_wake');
    await migrateDatabase(url);
    const w = await workflowTrial('pgdrain', url, runs, 5, postgresCpuMs);
    console.log(
      `\nworkflows: ${runs} runs sleeping 5 s went on p50 ${w.wakeLateP50Ms} ms and p99 ${w.wakeLateP99Ms} ms after their sleep ended (${w.seconds.toFixed(1)} s in all)`,
    );
    record(
      `workflows: ${fmt(runs)} runs sleeping 5 s, late after the sleep p50`,
      'pgdrain',
      'ms',
      [w.wakeLateP50Ms ?? Number.NaN],
      [],
      [],
    );
    record(
      `workflows: ${fmt(runs)} runs sleeping 5 s, late after the sleep p99`,
      'pgdrain',
      'ms',
      [w.wakeLateP99Ms ?? Number.NaN],
      [],
      [],
    );
    await admin.query('DROP DATABASE IF EXISTS bench_wf_wake WITH (FORCE)');
  }

  // No statement of pgdrain's JIT-compiled (a plan priced with a disabled node's penalty passes
  // jit_above_cost): read where the server has JIT and pg_stat_statements.
  let jitCompiled: { query: string; calls: number; jit_functions: number }[] = [];
  const [{ jit }] = (await admin.query(`SELECT pg_jit_available() AND current_setting('jit')::bool AS jit`)).rows;
  const [{ tracked }] = (
    await admin.query(`SELECT count(*) > 0 AS tracked FROM pg_extension WHERE extname = 'pg_stat_statements'`)
  ).rows;
  if (jit) {
    if (!tracked) await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements').catch(() => {});
    const rows = await admin
      .query(
        `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 200) AS query, calls::int, jit_functions::int FROM pg_stat_statements WHERE dbid = ANY($1::oid[]) AND jit_functions > 0 ORDER BY jit_functions DESC`,
        [pgdrainDatabases],
      )
      .catch((error: Error) => {
        console.log(
          `\nJIT check: pg_stat_statements cannot be read (${error.message}); load it with shared_preload_libraries`,
        );
        return { rows: [] };
      });
    jitCompiled = rows.rows;
    console.log(
      `\nJIT check (this server has JIT on): ${jitCompiled.length} of pgdrain's statements were JIT-compiled${jitCompiled.length ? ':' : ''}`,
    );
    for (const r of jitCompiled) console.log(`  ${r.jit_functions} functions over ${r.calls} calls: ${r.query}`);
    record("pgdrain's statements JIT-compiled", 'pgdrain', 'statements', [jitCompiled.length], [], []);
  }

  await admin.end();
  await stopServer();
  if (dir) await rm(dir, { recursive: true, force: true });

  // The peers' columns, then any system only some workloads have (the Worker's two paths).
  printTable([...new Set([...systems.map((s) => s.name), ...figures.map((f) => f.system)])]);
  for (const p of paired) {
    const [a, b] = [median(p.values[0]), median(p.values[1])];
    console.log(
      `\nthe cost of ${p.label}: ${p.a} ${fmt(a)} jobs/s, ${p.b} ${fmt(b)} jobs/s: ${(((b - a) / b) * 100).toFixed(1)}% of drain throughput (median of ${p.values[0].length} alternating pairs)`,
    );
  }
  for (const { driver, figures: worker } of workers) {
    console.log(
      `\nWorker (${driver}) scheduled(): ${worker.drains.map((w) => `${fmt(w.jobsPerSecond)} jobs/s at ${w.rttMs} ms RTT, ended ${w.budgetLeftMs} ms before its ${w.budgetMs} ms budget`).join('; ')}`,
    );
    // Workers Paid bills CPU time: 30M CPU-ms a month included, then $0.02 per million CPU-ms.
    const at10 = worker.drains.filter((w) => w.rttMs === (driver === 'neon' ? 10 : 0));
    if (at10.length > 0) {
      const cpuPer1000 = median(at10.map((w) => w.cpuMsPer1000));
      const perMinute = median(at10.map((w) => w.jobsPerSecond)) * 60;
      console.log(
        `Worker (${driver}) CPU: ${cpuPer1000.toFixed(1)} ms per 1,000 jobs; a busy minute (${fmt(perMinute)} jobs) is ${fmt((cpuPer1000 * perMinute) / 1000)} CPU-ms, ` +
          `$${(((cpuPer1000 * perMinute) / 1000 / 1e6) * 0.02).toFixed(6)} at $0.02 per million CPU-ms`,
      );
    }
    if (worker.runNow)
      console.log(
        `Worker (${driver}) runNow: POST /jobs → webhook delivered, p50 ${worker.runNow.p50Ms.toFixed(1)} ms, p99 ${worker.runNow.p99Ms.toFixed(1)} ms over ${worker.runNow.jobs} jobs`,
      );
  }
  if (clock) {
    const { idleMonth: m } = clock;
    console.log(
      `\nthe queue's clock: an idle cron invocation sends ${fmt(clock.statementsPerIdleCron.withClock)} statements with the clock, ${fmt(clock.statementsPerIdleCron.withoutClock)} without; ` +
        `the backstop's look ${fmt(clock.statementsPerBackstopLook)}; per idle hour ${fmt(clock.statementsPerIdleHour.withClock)} against ${fmt(clock.statementsPerIdleHour.withoutClock)}. ` +
        `Delayed jobs (${clock.delayed.jobs}, no cron) started ${clock.delayed.p50Ms.toFixed(0)} ms (p50), ${clock.delayed.p99Ms.toFixed(0)} ms (p99), ${clock.delayed.maxMs.toFixed(0)} ms (max) after their run_at.\n` +
        `An idle month on Neon's smallest compute (${NEON.smallestCu} CU, $${NEON.dollarsPerCuHour}/CU-hour on Launch, awake ${NEON.suspendAfterMinutes} min after a query): ` +
        `with the clock ~${m.withClock.awakeHours.toFixed(0)} h awake, $${m.withClock.dollars.toFixed(2)}; without it ${m.withoutClock.awakeHours.toFixed(0)} h, $${m.withoutClock.dollars.toFixed(2)} ` +
        `(${fmt(m.withoutClock.awakeHours * NEON.smallestCu)} CU-hours: the Free plan has ${NEON.freePlanCuHoursPerMonth})`,
    );
  }
  const targets = targetRows(figures, serverKind);
  printTargets(targets, { smoke: quick });
  const elapsed = Math.round((now() - started) / 1000);
  console.log(
    `\n${machine.date}, ${machine.cores} cores (${machine.cpu}), PostgreSQL ${settings.server_version} (jit=${settings.jit}, fsync=${settings.fsync}, synchronous_commit=${settings.synchronous_commit}, shared_buffers=${settings.shared_buffers}×8kB), Node ${machine.node}; ${elapsed} s`,
  );

  if (jsonFile) {
    const ratios: Record<string, number> = {};
    for (const f of figures.filter((x) => x.system === 'pgdrain')) {
      const peer = figures.find((x) => x.system === 'graphile-worker tuned' && x.workload === f.workload);
      if (peer) ratios[f.workload] = f.median / peer.median;
    }
    await writeFile(
      jsonFile,
      `${JSON.stringify({ machine, postgres: settings, versions, plan, quick, figures, workers, clock, ratiosPgdrainOverGraphileTuned: ratios, targets }, null, 2)}\n`,
    );
    console.log(`wrote ${jsonFile}`);
  }
  if (jitCompiled.length > 0) {
    console.log(`FAILED: ${jitCompiled.length} of pgdrain's statements were JIT-compiled on this server`);
    process.exitCode = 1;
  }
}

function printTable(systems: string[]) {
  const workloads = [...new Set(figures.map((f) => f.workload))];
  const cell = (w: string, s: string) => {
    const f = figures.find((x) => x.workload === w && x.system === s);
    if (!f) return '';
    return f.values.length > 1 ? `${fmt(f.median)} (${fmt(f.min)}–${fmt(f.max)})` : fmt(f.median);
  };
  const unit = (w: string) => figures.find((f) => f.workload === w)?.unit ?? '';
  const rows = [
    ['workload', ...systems],
    ...workloads.map((w) => [`${w} [${unit(w)}]`, ...systems.map((s) => cell(w, s))]),
  ];
  printRows(rows);
  // What each drain cost per job: PostgreSQL's CPU (its whole process tree) and this process's.
  const drains = workloads.filter((w) => figures.some((f) => f.workload === w && f.perJob));
  const perJob = (w: string, s: string) => {
    const f = figures.find((x) => x.workload === w && x.system === s)?.perJob;
    return f ? `${median(f.postgresMicros).toFixed(1)} / ${median(f.nodeMicros).toFixed(1)}` : '';
  };
  const drained = systems.filter((s) => drains.some((w) => perJob(w, s)));
  if (drained.length === 0) return;
  console.log('\nCPU per job of each drain (not its enqueue), PostgreSQL / Node (µs, median of the runs):');
  printRows([['drain', ...drained], ...drains.map((w) => [w, ...drained.map((s) => perJob(w, s))])]);
}

function printRows(rows: string[][]) {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log('');
  for (const [k, r] of rows.entries()) {
    console.log(`| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`);
    if (k === 0) console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  }
}

// A peer library's pool that lingers after its shutdown gets 57P01 when its database is dropped;
// that is the harness cleaning up, not a failure of the run.
process.on('uncaughtException', (error: { code?: string }) => {
  if (error?.code === '57P01') return;
  console.error(error);
  process.exit(1);
});

process.exitCode = 0;
await main();
process.exit(process.exitCode);
