// The queue's clock (src/worker/clock.ts) measured on the Worker in `wrangler dev`, Neon path: the
// statements an idle queue's cron invocations send the database with and without the clock
// (pg_stat_statements, top-level statements of this database, the local proxy's DISCARD ALL
// excluded: Neon's pooler does not send it), the statements of the backstop's look, and how late
// delayed jobs enqueued through the API start with no cron tick at all (their webhook's arrival
// against their run_at). From those, statements per idle hour and what a month of idleness costs
// on Neon's smallest compute.
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.ts';
import { startWsProxy } from '../src/dev/ws-proxy.ts';
import { trackStatements } from './sidecar-processes.ts';
import { startHookServer, startWranglerDev } from './wrangler-dev.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Neon's published figures used for the cost (neon.com's plans page, updated 2026-11-12): the
 * Launch plan's compute price, its smallest compute, and how long a compute stays up after a query. */
export const NEON = {
  dollarsPerCuHour: 0.106,
  smallestCu: 0.25,
  suspendAfterMinutes: 5,
  freePlanCuHoursPerMonth: 100,
} as const;
const HOURS_PER_MONTH = 730;

export interface ClockFigures {
  crons: number;
  statementsPerIdleCron: { withClock: number; withoutClock: number };
  /** One look of the backstop's (BACKSTOP_POLL_SECONDS passed): once per interval with the clock. */
  statementsPerBackstopLook: number;
  /** With BACKSTOP_POLL_SECONDS 3600 (the mode in which the database may sleep) and a `* * * * *` cron. */
  statementsPerIdleHour: { withClock: number; withoutClock: number };
  /** Delayed jobs through the API: their start (webhook arrival) after their run_at, in ms. */
  delayed: { jobs: number; p50Ms: number; p99Ms: number; maxMs: number };
  /** An idle month on Neon's smallest compute: hours awake and dollars at the Launch price. */
  idleMonth: {
    withClock: { awakeHours: number; dollars: number };
    withoutClock: { awakeHours: number; dollars: number };
  };
}

/** wrangler.toml without the clock's binding and migration: the Worker as it is without it. */
async function configWithoutClock(): Promise<string> {
  const toml = await readFile(path.join(root, 'wrangler.toml'), 'utf8');
  const blocks = toml.split(/\n(?=\[)/);
  const kept = blocks.filter((b) => !b.startsWith('[[durable_objects.bindings]]') && !b.startsWith('[[migrations]]'));
  if (kept.length !== blocks.length - 2)
    throw new Error('wrangler.toml: expected one durable_objects binding and one migration');
  // Beside wrangler.toml, so that its relative paths (main, the build) mean the same.
  const file = path.join(root, '.bench-wrangler-without-clock.toml');
  await writeFile(file, kept.join('\n'));
  return file;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function benchWorkerClock(
  url: string,
  options: { crons: number; delayedJobs: number },
): Promise<ClockFigures> {
  await migrateDatabase(url);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  if (!(await trackStatements(pool)))
    throw new Error("the clock rows need pg_stat_statements loaded (the benchmark's own server has it)");
  const target = new URL(url);
  // Started after tracking is on: its sessions (kept for the next client) count their statements.
  const proxy = await startWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) } });
  const statementsSince = async (): Promise<number> => {
    const { rows } = await pool.query(
      `SELECT coalesce(sum(calls), 0)::int AS n FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query NOT ILIKE 'DISCARD%' AND query NOT ILIKE '%pg_stat_statements%'`,
    );
    return rows[0].n;
  };
  const reset = () => pool.query('SELECT pg_stat_statements_reset()');
  const database = { DATABASE_URL: url, NEON_WS_PROXY: proxy.address };
  const hook = await startHookServer(() => Date.now());
  const { arrivals, port: hookPort } = hook;
  const withoutClockFile = await configWithoutClock();
  try {
    // Without the clock: every invocation looks (after one to warm up).
    const plain = await startWranglerDev({ vars: database, config: path.basename(withoutClockFile) });
    let withoutClock: number;
    try {
      await plain.cron();
      await reset();
      for (let i = 0; i < options.crons; i++) await plain.cron();
      withoutClock = (await statementsSince()) / options.crons;
    } finally {
      await plain.stop();
    }

    // With the clock, a 5 s backstop so that one look of its can be measured here.
    const backstopSeconds = 5;
    const clocked = await startWranglerDev({
      vars: {
        ...database,
        BACKSTOP_POLL_SECONDS: String(backstopSeconds),
        WEBHOOK_ALLOWED_HOSTS: `127.0.0.1:${hookPort}`,
      },
    });
    try {
      const firstLook = Date.now();
      await clocked.cron(); // a new clock looks once, housekeeping included
      await reset();
      for (let i = 0; i < options.crons; i++) await clocked.cron();
      const withClock = (await statementsSince()) / options.crons;
      if (Date.now() - firstLook >= backstopSeconds * 1000)
        throw new Error('the idle crons took longer than the backstop interval');
      // The backstop's look: the alarm (or a cron, whichever comes first) once the interval has
      // passed since the last look; a cron after it finds it done.
      await reset();
      await sleep(backstopSeconds * 1000 + 1_500 - (Date.now() - firstLook));
      await clocked.cron();
      const backstopLook = await statementsSince();

      // Delayed jobs through the API, 1-3 s ahead: the clock's alarm starts them, no cron tick.
      const runAts = new Map<number, number>();
      for (let seq = 0; seq < options.delayedJobs; seq++) {
        const res = await clocked.post('/jobs', {
          kind: 'webhook',
          payload: { url: `http://127.0.0.1:${hookPort}/hook`, body: { seq } },
          delaySeconds: 1 + (seq % 3),
        });
        if (res.status !== 201) throw new Error(`POST /jobs answered ${res.status}: ${await res.text()}`);
        runAts.set(seq, Date.parse(((await res.json()) as { runAt: string }).runAt));
      }
      for (const deadline = Date.now() + 20_000; arrivals.size < options.delayedJobs && Date.now() < deadline; )
        await sleep(20);
      if (arrivals.size < options.delayedJobs)
        throw new Error(`${options.delayedJobs - arrivals.size} delayed jobs did not start within 20 s without a cron`);
      const late = [...runAts].map(([seq, at]) => arrivals.get(seq)! - at).sort((a, b) => a - b);
      const at = (p: number) => late[Math.min(late.length - 1, Math.ceil((p / 100) * late.length) - 1)]!;

      // An hour of a * * * * * cron: without the clock 60 looks; with it one backstop look (3600 s)
      // and 59 idle invocations. A look keeps a Neon compute up for the suspend window after it:
      // with the clock, the backstop's looks and the history's daily housekeeping (UTC midnight).
      const perHour = { withClock: backstopLook + 59 * withClock, withoutClock: 60 * withoutClock };
      const wakeUpsPerMonth = withClock > 0 ? Number.POSITIVE_INFINITY : HOURS_PER_MONTH + 30;
      const awakeWithClock = Math.min(HOURS_PER_MONTH, (wakeUpsPerMonth * NEON.suspendAfterMinutes) / 60);
      const cost = (hours: number) => ({ awakeHours: hours, dollars: hours * NEON.smallestCu * NEON.dollarsPerCuHour });
      return {
        crons: options.crons,
        statementsPerIdleCron: { withClock, withoutClock },
        statementsPerBackstopLook: backstopLook,
        statementsPerIdleHour: perHour,
        delayed: { jobs: late.length, p50Ms: at(50), p99Ms: at(99), maxMs: late.at(-1)! },
        idleMonth: { withClock: cost(awakeWithClock), withoutClock: cost(withoutClock > 0 ? HOURS_PER_MONTH : 0) },
      };
    } finally {
      await clocked.stop();
    }
  } finally {
    await rm(withoutClockFile, { force: true });
    await hook.close();
    await proxy.close();
    await pool.end();
  }
}
