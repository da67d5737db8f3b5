// The Worker's drainer measured where it runs: `wrangler dev` (workerd), on either of its paths —
// the Neon driver through the local WebSocket proxy (whose delay dials a network round trip), or
// node-postgres through a local Hyperdrive binding (a direct TCP proxy: no delay to dial) — one
// `scheduled()` invocation per repetition over a backlog of noop jobs. The first invocation of a new
// `wrangler dev` finds workerd's JIT cold (its CPU about twice a warm one's); it is measured on its
// own (`cold`) and not counted among the repetitions, as every drain of the sidecar and its peers
// follows one untimed drain.
import { readFile, readdir } from 'node:fs/promises';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.ts';
import { withPlaceholderPassword } from '../src/db/url.ts';
import { startWsProxy } from '../src/dev/ws-proxy.ts';
import { type Db, enqueueMany } from '../src/queries/index.ts';
import { startHookServer, startWranglerDev } from './wrangler-dev.ts';

export interface WorkerFigure {
  /** The round trip the proxy added between workerd and PostgreSQL. */
  rttMs: number;
  completed: number;
  /** workerd's process CPU (user + system) over the invocation, per 1,000 jobs it completed: what
   * Workers bill is CPU time, not wall time. */
  cpuMsPer1000: number;
  elapsedMs: number;
  budgetMs: number;
  budgetLeftMs: number;
  jobsPerSecond: number;
  /** Reap, roll-up and prune (with their connection), beside the drain. */
  housekeepingMs: number;
}

export interface RunNowFigure {
  jobs: number;
  /** POST /jobs sent → the webhook handler's request arriving, per job. */
  p50Ms: number;
  p99Ms: number;
}

/** CPU time (user + system, ms) of the workerd processes of one `wrangler dev`, from /proc (Linux). */
export async function workerdCpuMs(wranglerPid: number): Promise<number> {
  // wrangler dev runs more than one workerd (its own proxy in front, the Worker behind it): every
  // workerd descended from this wrangler counts.
  const processes = new Map<number, { ppid: number; name: string; cpuMs: number }>();
  for (const entry of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (!stat) continue;
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticksPerSecond = 100; // USER_HZ
    processes.set(Number(entry), {
      ppid: Number(fields[1]),
      name,
      cpuMs: ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond,
    });
  }
  const descends = (pid: number): boolean => {
    for (let p = processes.get(pid)?.ppid; p !== undefined && p > 1; p = processes.get(p)?.ppid)
      if (p === wranglerPid) return true;
    return false;
  };
  let total = 0;
  let found = false;
  for (const [pid, p] of processes) {
    if (p.name !== 'workerd' || !descends(pid)) continue;
    total += p.cpuMs;
    found = true;
  }
  return found ? total : Number.NaN;
}

export async function benchWorkerDrainer(
  url: string,
  options: {
    driver: 'neon' | 'hyperdrive';
    jobs: number;
    reps: number;
    budgetMs?: number;
    runNowJobs?: number;
    /** Neon path only: round trips the proxy adds, one set of repetitions each. */
    rttsMs?: number[];
    /** Neon path only: POST /jobs requests timed at a 10 ms round trip. */
    enqueueRequests?: number;
  },
): Promise<{ cold: WorkerFigure; drains: WorkerFigure[]; runNow?: RunNowFigure; enqueueP50At10MsRtt?: number }> {
  const budgetMs = options.budgetMs ?? 5_000;
  const neon = options.driver === 'neon';
  await migrateDatabase(url);
  const target = new URL(url);
  const proxy = neon
    ? await startWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) } })
    : null;
  // runNow's latency: webhook jobs to a server here, each arrival timed against its POST.
  const hook = await startHookServer(() => performance.now());
  const { arrivals, url: hookUrl, port: hookPort } = hook;
  // Every cron invocation looks at the database (BACKSTOP_POLL_SECONDS=0): the backlogs here are
  // enqueued behind the Worker's back, where its clock cannot see them (bench/worker-clock.ts
  // measures the clock itself).
  const worker = await startWranglerDev({
    vars: {
      ...(proxy ? { DATABASE_URL: url, NEON_WS_PROXY: proxy.address } : {}),
      DRAIN_BUDGET_MS: String(budgetMs),
      WEBHOOK_ALLOWED_HOSTS: `127.0.0.1:${hookPort}`,
      BACKSTOP_POLL_SECONDS: '0',
    },
    ...(neon
      ? {}
      : {
          config: 'wrangler.hyperdrive.toml',
          env: { CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE: withPlaceholderPassword(url) },
        }),
  }).catch(async (error) => {
    await hook.close();
    await proxy?.close();
    throw error;
  });
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const db = drizzle({ client: pool }) as unknown as Db;
  const figures: WorkerFigure[] = [];
  let runNow: RunNowFigure | undefined;
  let enqueueP50At10MsRtt: number | undefined;
  const postJob = (body: unknown) => worker.post('/jobs', body);
  /** One scheduled() over a fresh backlog of options.jobs noop jobs. */
  const drainOnce = async (rttMs: number, label: string): Promise<WorkerFigure> => {
    proxy?.setDelayMs(rttMs / 2);
    await pool.query('DELETE FROM pgdrain.jobs');
    await enqueueMany(
      db,
      Array.from({ length: options.jobs }, (_, i) => ({ kind: 'noop', payload: { i } })),
    );
    const cpuBefore = await workerdCpuMs(worker.process.pid!);
    const report = (await worker.cron()) as { completed: number; elapsedMs: number; housekeepingMs: number };
    const cpuMs = (await workerdCpuMs(worker.process.pid!)) - cpuBefore;
    const figure = {
      rttMs,
      completed: report.completed,
      cpuMsPer1000: (cpuMs / Math.max(1, report.completed)) * 1000,
      elapsedMs: report.elapsedMs,
      budgetMs,
      budgetLeftMs: budgetMs - report.elapsedMs,
      housekeepingMs: report.housekeepingMs,
      jobsPerSecond: report.completed / (report.elapsedMs / 1000),
    };
    console.log(
      `  Worker (${options.driver}) scheduled() at ${rttMs} ms RTT, ${label}: ${figure.completed} jobs in ${figure.elapsedMs} ms = ` +
        `${Math.round(figure.jobsPerSecond)} jobs/s (housekeeping beside the drain: ${figure.housekeepingMs} ms), workerd CPU ${figure.cpuMsPer1000.toFixed(1)} ms per 1,000 jobs; ${figure.budgetLeftMs} ms of the ${budgetMs} ms budget left`,
    );
    return figure;
  };
  let cold: WorkerFigure;
  try {
    cold = await drainOnce(0, 'the first invocation (cold JIT, not a repetition)');
    for (const rttMs of neon ? (options.rttsMs ?? [0]) : [0]) {
      for (let r = 0; r < options.reps; r++) figures.push(await drainOnce(rttMs, `rep ${r + 1}/${options.reps}`));
    }
    proxy?.setDelayMs(0);
    // POST /jobs at a 10 ms round trip, request to response.
    if (proxy && options.enqueueRequests) {
      proxy.setDelayMs(5);
      const times: number[] = [];
      for (let i = 0; i < options.enqueueRequests; i++) {
        const t0 = performance.now();
        const res = await postJob({ kind: 'noop', payload: { i } });
        await res.text();
        if (res.status !== 201) throw new Error(`POST /jobs answered ${res.status}`);
        times.push(performance.now() - t0);
      }
      proxy.setDelayMs(0);
      times.sort((a, b) => a - b);
      enqueueP50At10MsRtt = times[Math.floor(times.length / 2)]!;
      console.log(
        `  Worker POST /jobs at 10 ms RTT: p50 ${enqueueP50At10MsRtt.toFixed(1)} ms over ${times.length} requests`,
      );
    }
    if (options.runNowJobs) {
      await pool.query('DELETE FROM pgdrain.jobs');
      const latencies: number[] = [];
      for (let seq = 0; seq < options.runNowJobs; seq++) {
        const sent = performance.now();
        const res = await postJob({ kind: 'webhook', payload: { url: hookUrl, body: { seq } }, runNow: true });
        if (res.status !== 201) throw new Error(`POST /jobs with runNow answered ${res.status}: ${await res.text()}`);
        for (let waited = 0; !arrivals.has(seq); waited += 1) {
          if (waited > 5_000) throw new Error(`runNow job ${seq} was not delivered within 5 s`);
          await new Promise((r2) => setTimeout(r2, 1));
        }
        latencies.push(arrivals.get(seq)! - sent);
      }
      latencies.sort((a, b) => a - b);
      const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.ceil((p / 100) * latencies.length) - 1)]!;
      runNow = { jobs: latencies.length, p50Ms: at(50), p99Ms: at(99) };
      console.log(
        `  Worker (${options.driver}) runNow: ${latencies.length} webhook jobs, POST → delivery p50 ${runNow.p50Ms.toFixed(1)} ms, p99 ${runNow.p99Ms.toFixed(1)} ms, no cron`,
      );
    }
  } finally {
    await hook.close();
    await worker.stop();
    await pool.end();
    await proxy?.close();
  }
  return { cold, drains: figures, runNow, enqueueP50At10MsRtt };
}
