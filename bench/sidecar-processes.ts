// `drain 50k, N processes`: N real sidecar processes (`pgdrain start`, default settings) on one
// database, idle first, then one backlog committed at once (its NOTIFY wakes them all); timed from
// the COMMIT until no job is pending or running (the rows are written before, in the open
// transaction; the check walks the two partial indexes, so it costs the drain next to nothing).
// Each process writes the jobs it ran when it exits, and every job must have run exactly once
// across them.
//
// `burst`: what an idle queue meets. The table is analyzed while empty (what autovacuum does to a
// queue that drained), the processes idle a few seconds (their claims planned and cached on the
// empty table), then the backlog arrives in one transaction. `analyzeBeforeWake` runs ANALYZE on
// the loaded backlog before the processes may claim it (the kind is paused while it loads): the
// same burst with fresh statistics, for comparison.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.ts';
import { NOTIFY_CHANNEL } from '../src/queries/index.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface ProcessDrainOptions {
  burst?: boolean;
  analyzeBeforeWake?: boolean;
  /** The server's CPU so far (ms, every process of its postmaster), read at the COMMIT and at the
   * end: PostgreSQL's CPU per job, where its statement time also counts the waits of a backend the
   * machine's cores are busy elsewhere for (four sidecars and PostgreSQL on two cores). */
  postgresCpuMs?: () => Promise<number>;
  /** More settings for every process (their defaults otherwise). */
  env?: Record<string, string>;
  /** Samples pg_stat_activity every LOCK_SAMPLE_MS over the drain for the sidecars' backends that
   * wait on a heavyweight lock: ProcessDrainResult.lockWaitMsPerClaim. */
  sampleLockWaits?: boolean;
}

export interface ProcessDrainResult {
  jobsPerSecond: number;
  missing: number;
  duplicated: number;
  /** PostgreSQL's execution time per job of every statement the sidecars sent during the drain
   * (pg_stat_statements), in µs; null where the server has no pg_stat_statements loaded. */
  postgresMicrosPerJob: number | null;
  /** The server's CPU per job over the drain (µs); null without `postgresCpuMs`. */
  postgresCpuMicrosPerJob: number | null;
  /** Statements that claimed (pgdrain.claim(), alone or after a settlement) over the drain; null
   * without pg_stat_statements. */
  claims: number | null;
  /** With `sampleLockWaits`: the sidecars' backends seen waiting on a lock (wait_event_type Lock),
   * sample by sample, times the sampling interval, per claim (ms): an estimate, not a count. */
  lockWaitMsPerClaim: number | null;
  /** The statements that cost PostgreSQL most over the drain: calls and execution µs per job. */
  topStatements: { query: string; callsPerJob: number; microsPerJob: number }[];
}

const LOCK_SAMPLE_MS = 10;

/** Counts, until stopped, the backends of this database (but the sampler's own) that wait on a
 * heavyweight lock, every LOCK_SAMPLE_MS: the sum of waiting backends over the samples. */
function sampleLockWaits(url: string, untracked: string): { stop: () => Promise<number> } {
  const client = new pg.Client({ connectionString: url, options: untracked.trim() || undefined });
  let waiting = 0;
  let running = true;
  const loop = (async () => {
    await client.connect();
    while (running) {
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`,
      );
      waiting += rows[0].n;
      await new Promise((r) => setTimeout(r, LOCK_SAMPLE_MS));
    }
    await client.end();
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return waiting;
    },
  };
}

/** Turns pg_stat_statements on for this database's new sessions, if the server has it loaded
 * (the benchmark's embedded server loads it with tracking off everywhere else). */
export async function trackStatements(pool: pg.Pool): Promise<boolean> {
  try {
    await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await pool.query('SELECT 1 FROM pg_stat_statements LIMIT 1');
    const { rows } = await pool.query('SELECT current_database() AS db');
    await pool.query(`ALTER DATABASE ${pg.escapeIdentifier(rows[0].db)} SET pg_stat_statements.track = 'top'`);
    return true;
  } catch {
    return false;
  }
}

export async function drainWithProcesses(
  url: string,
  processes: number,
  jobs: number,
  options: ProcessDrainOptions = {},
): Promise<ProcessDrainResult> {
  await migrateDatabase(url);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-bench-processes-'));
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  const tracked = await trackStatements(pool);
  // The harness's own statements are not the sidecars': not tracked.
  const untracked = tracked ? ' -c pg_stat_statements.track=none' : '';
  const harness = new pg.Pool({ connectionString: url, max: 1, options: untracked.trim() || undefined });
  harness.on('error', () => {});
  const watcher = new pg.Client({
    connectionString: url,
    options: `-c enable_seqscan=off -c enable_bitmapscan=off${untracked}`,
  });
  await watcher.connect();
  const children: { child: ChildProcess; exited: Promise<void> }[] = [];
  try {
    await pool.query('DELETE FROM pgdrain.jobs');
    if (options.burst) await pool.query('ANALYZE pgdrain.jobs');
    for (let k = 0; k < processes; k++) {
      const child = spawn(
        process.execPath,
        [path.join(ROOT, 'src/entry/cli.ts'), 'start', '--jobs', path.join(ROOT, 'bench/fixtures/counting-jobs.ts')],
        {
          cwd: ROOT,
          env: {
            PATH: process.env.PATH ?? '',
            DATABASE_URL: url,
            API_TOKEN: 'bench-processes-token-0123',
            PORT: '0',
            LOG_LEVEL: 'info',
            LOG_FORMAT: 'json',
            BENCH_RUNS_FILE: path.join(dir, `runs-${k}.txt`),
            ...options.env,
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      children.push({ child, exited });
      // Up when its HTTP API answers (its LISTEN is set up before it serves).
      for (let waited = 0; ; waited += 100) {
        const port = /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(out)?.[1];
        if (
          port &&
          (await fetch(`http://127.0.0.1:${port}/healthz`).then(
            (r) => r.ok,
            () => false,
          ))
        )
          break;
        if (waited > 20_000 || child.exitCode !== null) throw new Error(`sidecar process ${k} did not start:\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    if (options.burst) await new Promise((r) => setTimeout(r, 3_000)); // idle: a few empty polls
    const loader = await harness.connect();
    let t0: number;
    let cpuAtCommit: number | undefined;
    try {
      await loader.query('BEGIN');
      if (options.analyzeBeforeWake) await loader.query(`INSERT INTO pgdrain.paused_kinds (kind) VALUES ('bench')`);
      await loader.query(
        `INSERT INTO pgdrain.jobs (kind, payload) SELECT 'bench', jsonb_build_object('i', i) FROM generate_series(0, $1::int - 1) AS i`,
        [jobs],
      );
      await loader.query(`SELECT pg_notify($1, 'bench')`, [NOTIFY_CHANNEL]);
      if (tracked) await loader.query('SELECT pg_stat_statements_reset()');
      cpuAtCommit = await options.postgresCpuMs?.();
      t0 = performance.now();
      await loader.query('COMMIT');
      if (options.analyzeBeforeWake) {
        await loader.query('ANALYZE pgdrain.jobs');
        await loader.query('BEGIN');
        await loader.query(`DELETE FROM pgdrain.paused_kinds WHERE kind = 'bench'`);
        await loader.query(`SELECT pg_notify($1, 'bench')`, [NOTIFY_CHANNEL]);
        if (tracked) await loader.query('SELECT pg_stat_statements_reset()');
        cpuAtCommit = await options.postgresCpuMs?.();
        t0 = performance.now();
        await loader.query('COMMIT');
      }
    } finally {
      loader.release();
    }
    // Done when nothing is pending or running: the first entry of each partial index (jobs_ready,
    // jobs_running), never a scan of the table (its planner told so), which would compete with the
    // drain for the cores.
    const lockSampler = options.sampleLockWaits ? sampleLockWaits(url, untracked) : null;
    for (;;) {
      const { rows } = await watcher.query(
        `SELECT EXISTS (SELECT 1 FROM pgdrain.jobs WHERE status = 'pending') OR EXISTS (SELECT 1 FROM pgdrain.jobs WHERE status = 'running') AS busy`,
      );
      if (!rows[0].busy) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpuAtEnd = await options.postgresCpuMs?.();
    const lockWaitSamples = await lockSampler?.stop();
    const postgresCpuMicrosPerJob =
      cpuAtCommit !== undefined && cpuAtEnd !== undefined && Number.isFinite(cpuAtEnd - cpuAtCommit)
        ? ((cpuAtEnd - cpuAtCommit) * 1000) / jobs
        : null;
    let postgresMicrosPerJob: number | null = null;
    let claims: number | null = null;
    let topStatements: ProcessDrainResult['topStatements'] = [];
    if (tracked) {
      const { rows } = await harness.query(
        `SELECT coalesce(sum(total_exec_time), 0)::float8 AS ms FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      postgresMicrosPerJob = (Number(rows[0].ms) * 1000) / jobs;
      const statements = await harness.query(
        `SELECT query, calls::float8 AS calls, total_exec_time::float8 AS ms, query ~ 'pgdrain\\.claim\\(' AS claims
           FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY total_exec_time DESC`,
      );
      claims = statements.rows.filter((r) => r.claims).reduce((sum, r) => sum + Number(r.calls), 0);
      topStatements = statements.rows.slice(0, 5).map((r) => ({
        query: String(r.query).replace(/\s+/g, ' ').slice(0, 90),
        callsPerJob: Number(r.calls) / jobs,
        microsPerJob: (Number(r.ms) * 1000) / jobs,
      }));
    }
    const lockWaitMsPerClaim =
      lockWaitSamples !== undefined && claims ? (lockWaitSamples * LOCK_SAMPLE_MS) / claims : null;
    for (const { child } of children) child.kill('SIGTERM');
    await Promise.all(children.map((c) => c.exited));
    const seen = new Map<number, number>();
    for (let k = 0; k < processes; k++) {
      for (const line of (await readFile(path.join(dir, `runs-${k}.txt`), 'utf8')).split('\n').filter(Boolean))
        seen.set(Number(line), (seen.get(Number(line)) ?? 0) + 1);
    }
    let missing = 0;
    let duplicated = 0;
    for (let i = 0; i < jobs; i++) {
      const n = seen.get(i) ?? 0;
      if (n === 0) missing++;
      if (n > 1) duplicated++;
    }
    return {
      jobsPerSecond: jobs / seconds,
      missing,
      duplicated,
      postgresMicrosPerJob,
      postgresCpuMicrosPerJob,
      claims,
      lockWaitMsPerClaim,
      topStatements,
    };
  } finally {
    for (const { child } of children) if (child.exitCode === null) child.kill('SIGKILL');
    await pool.end();
    await harness.end();
    await watcher.end();
    await rm(dir, { recursive: true, force: true });
  }
}
