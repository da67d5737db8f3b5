// The queues under test, behind one interface. Each runs with trivial handlers, in this process,
// against its own fresh database. Setup SQL for the other systems' history rows lives here; it is
// benchmark fixture, not queue code.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import * as otel from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BatchSpanProcessor, InMemorySpanExporter, TracerProvider } from '@opentelemetry/sdk-trace';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import pino from 'pino';
import { z } from 'zod';
import { migrateDatabase } from '../src/db/migrate.ts';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';
import { type Db, enqueue, enqueueMany } from '../src/queries/index.ts';
import { createDrainPool } from '../src/sidecar/database.ts';
import { Drainer } from '../src/sidecar/drainer.ts';
import { startSidecar } from '../src/sidecar/index.ts';
import { useOpenTelemetry } from '../src/open-telemetry.ts';

/** Counts handler runs by job index; a drain must see every index exactly once. */
export class RunCounter {
  readonly counts: Uint8Array;
  total = 0;
  #waiter: (() => void) | null = null;
  constructor(n: number) {
    this.counts = new Uint8Array(n);
  }
  hit(i: number): void {
    this.counts[i] = (this.counts[i] ?? 0) + 1;
    this.total++;
    if (this.total >= this.counts.length) this.#waiter?.();
  }
  done(): Promise<void> {
    return this.total >= this.counts.length ? Promise.resolve() : new Promise((r) => (this.#waiter = r));
  }
  /** [jobs never run, jobs run more than once] */
  check(): [number, number] {
    let missing = 0;
    let duplicated = 0;
    for (const c of this.counts) {
      if (c === 0) missing++;
      else if (c > 1) duplicated++;
    }
    return [missing, duplicated];
  }
}

export interface IdleWorkers {
  /** One job; its handler calls onStart(seq) first, then takes `ms` (0: returns at once). */
  enqueueOne(seq: number, ms?: number): Promise<void>;
  stop(): Promise<void>;
}

/** A wake-up job's payload: its sequence number, and how long its handler takes. */
type WakePayload = { i?: number; seq?: number; ms?: number };
const takeTime = (p: WakePayload) => (p.ms ? new Promise<void>((r) => setTimeout(r, p.ms)) : undefined);

export interface BenchSystem {
  name: string;
  version: string;
  install(url: string): Promise<void>;
  /** Removes every job but the history rows. */
  reset(): Promise<void>;
  enqueue(n: number): Promise<void>;
  /** Starts the workers, resolves once `counter` has seen every job, stops them. */
  drain(counter: RunCounter): Promise<void>;
  idle(onStart: (seq: number) => void): Promise<IdleWorkers>;
  /** `n` jobs committed in one transaction into an idle worker whose table was analyzed empty;
   * jobs/s from the COMMIT until every job ran (each exactly once, or it throws). Only systems
   * the benchmark sets pgdrain's burst beside (issue 39: graphile-worker tuned) have it. */
  burst?(n: number): Promise<number>;
  /** `n` dead/failed rows the claim must not trip over. */
  seedHistory(n: number): Promise<void>;
  /** The table the workload fills, for ANALYZE. */
  table: string;
  close(): Promise<void>;
}

const version = (name: string) =>
  (
    JSON.parse(readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), 'utf8')) as {
      version: string;
    }
  ).version;
const silent = pino({ level: 'silent' });
const payloads = (n: number) => Array.from({ length: n }, (_, i) => ({ i }));

// --- pgdrain: the sidecar's own drain path ------------------------------------------------------
/** `recordCounts: false` drains without adding to job_counts: what counting costs. `priorities`
 * enqueues the jobs with 21 different priorities (-10..10) instead of all at 0: what they cost.
 * `globalConcurrency` and `groups` (keys, one job at a time each) limit the bench kind across
 * drainers; `unusedLimits` registers limited kinds next to it that have no jobs: what limits cost
 * the kinds that have none. `keepResults`: the kind keeps its completed jobs (keepCompletedSeconds)
 * with what the handler returns: what a history costs. `tracing`: an OpenTelemetry tracer provider
 * (the real SDK, batching spans to an in-memory exporter) is registered during the drain, so every
 * claim and every handler run is a span: what tracing costs; the others run with no API at all. */
export interface PgdrainVariant {
  recordCounts?: boolean;
  priorities?: boolean;
  globalConcurrency?: number;
  groups?: number;
  unusedLimits?: boolean;
  keepResults?: boolean;
  tracing?: boolean;
  /** The drainer's VACUUM_EVERY_JOBS (0: off). Default the sidecar's. */
  vacuumEveryJobs?: number;
}

export function pgdrainSystem(variant: PgdrainVariant = {}): BenchSystem {
  let pool: pg.Pool;
  let db: Db;
  let drainPool: pg.Pool;
  let drainDb: Db;
  let url: string;
  let onRun: (payload: WakePayload) => void = () => {};
  const registry = new JobRegistry([
    defineJob({
      kind: 'bench',
      schema: z.object({ i: z.number().optional(), seq: z.number().optional(), ms: z.number().optional() }),
      handler: (p) => {
        onRun(p);
        if (p.ms) return takeTime(p);
        return variant.keepResults ? { ran: p.i } : undefined;
      },
      keepCompletedSeconds: variant.keepResults ? 3_600 : undefined,
      globalConcurrency: variant.globalConcurrency,
      groupConcurrency: variant.groups ? 1 : undefined,
    }),
    ...(variant.unusedLimits
      ? [
          defineJob({ kind: 'bench-limited', schema: z.unknown(), handler: () => {}, globalConcurrency: 5 }),
          defineJob({
            kind: 'bench-rated',
            schema: z.unknown(),
            handler: () => {},
            rateLimit: { limit: 10, periodSeconds: 1 },
          }),
        ]
      : []),
  ]);
  // The sidecar's defaults and its drain pool: the same path `npm start` runs.
  const options = {
    workerId: 'bench',
    placement: 'near' as const,
    pollIntervalMs: 1000,
    recordCounts: variant.recordCounts,
    vacuumEveryJobs: variant.vacuumEveryJobs,
    // The sidecar's VACUUM of the jobs table runs on the API's pool, not the drain's.
    get vacuumDb() {
      return db;
    },
  };
  return {
    name:
      variant.recordCounts === false
        ? 'pgdrain, counts off'
        : variant.priorities
          ? 'pgdrain, priorities'
          : variant.globalConcurrency
            ? `pgdrain, globalConcurrency ${variant.globalConcurrency}`
            : variant.groups
              ? `pgdrain, ${variant.groups} groups`
              : variant.unusedLimits
                ? 'pgdrain, other kinds limited'
                : variant.keepResults
                  ? 'pgdrain, results kept'
                  : variant.tracing
                    ? 'pgdrain, traced'
                    : 'pgdrain',
    version: (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
      .version,
    table: 'pgdrain.jobs',
    async install(u) {
      url = u;
      await migrateDatabase(url);
      pool = new pg.Pool({ connectionString: url, max: 10 });
      pool.on('error', () => {});
      db = drizzle({ client: pool }) as unknown as Db;
      drainPool = createDrainPool(url);
      drainPool.on('error', () => {});
      drainDb = drizzle({ client: drainPool }) as unknown as Db;
    },
    async reset() {
      await pool.query(`DELETE FROM pgdrain.jobs WHERE status <> 'dead'`);
    },
    async enqueue(n) {
      await enqueueMany(
        db,
        payloads(n).map((payload, i) => ({
          kind: 'bench',
          payload,
          priority: variant.priorities ? (i % 21) - 10 : undefined,
          groupKey: variant.groups ? `g${i % variant.groups}` : undefined,
          keepSeconds: variant.keepResults ? 3_600 : undefined,
        })),
      );
    },
    async drain(counter) {
      onRun = (p) => counter.hit(p.i as number);
      const traced = variant.tracing ? startTracing() : null;
      if (!traced) useOpenTelemetry(null);
      try {
        const drainer = new Drainer(drainDb, registry, options).start();
        await counter.done();
        await drainer.stop(10_000);
      } finally {
        await traced?.stop();
      }
    },
    async idle(onStart) {
      onRun = (p) => onStart(p.seq as number);
      const sidecar = await startSidecar({
        databaseUrl: url,
        registry,
        port: 0,
        apiToken: 'bench-token-0123456789',
        logger: silent,
        pollIntervalMs: 1000,
      });
      return {
        enqueueOne: async (seq, ms) => void (await enqueue(db, { kind: 'bench', payload: { seq, ms } })),
        stop: () => sidecar.stop(),
      };
    },
    async seedHistory(n) {
      await pool.query(
        `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error)
         SELECT 'bench', '{}', 'dead', 3, 3, 'boom' FROM generate_series(1, $1::int)`,
        [n],
      );
    },
    close: async () => {
      await pool.end();
      await drainPool.end();
    },
  };
}

/** The real SDK, registered globally for one drain: batched spans to an in-memory exporter. */
function startTracing() {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new BatchSpanProcessor({ exporter })] });
  otel.trace.setGlobalTracerProvider(provider);
  otel.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  useOpenTelemetry(otel);
  return {
    stop: async () => {
      await provider.forceFlush();
      await provider.shutdown();
      exporter.reset();
      otel.trace.disable();
      otel.context.disable();
      useOpenTelemetry(null);
    },
  };
}

// --- graphile-worker, in-process run() ----------------------------------------------------------
export function graphileSystem(tuned: boolean): BenchSystem {
  let url: string;
  let utils: import('graphile-worker').WorkerUtils;
  let pool: pg.Pool;
  const preset = tuned
    ? {
        worker: {
          concurrentJobs: 80,
          maxPoolSize: 12,
          localQueue: { size: 500 },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
          preparedStatements: true,
          pollInterval: 1000,
        },
      }
    : { worker: { concurrentJobs: 4 } };
  const start = async (task: (payload: WakePayload) => void) => {
    const { run } = await import('graphile-worker');
    const bench = async (payload: unknown) => {
      task(payload as WakePayload);
      await takeTime(payload as WakePayload);
    };
    return run({
      connectionString: url,
      noHandleSignals: true,
      logger: graphileSilentLogger(),
      preset,
      taskList: { bench },
    });
  };
  return {
    name: tuned ? 'graphile-worker tuned' : 'graphile-worker default',
    version: version('graphile-worker'),
    table: 'graphile_worker._private_jobs',
    async install(u) {
      url = u;
      const { makeWorkerUtils } = await import('graphile-worker');
      utils = await makeWorkerUtils({ connectionString: url, logger: graphileSilentLogger() });
      await utils.migrate();
      pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
    },
    async reset() {
      await pool.query(`DELETE FROM graphile_worker._private_jobs WHERE attempts < max_attempts`);
    },
    async enqueue(n) {
      for (let s = 0; s < n; s += 10_000) {
        await utils.addJobs(
          payloads(Math.min(10_000, n - s)).map((p, _k) => ({ identifier: 'bench', payload: { i: p.i + s } })),
        );
      }
    },
    async drain(counter) {
      const runner = await start((p) => counter.hit(p.i as number));
      await counter.done();
      await runner.stop();
    },
    async idle(onStart) {
      const runner = await start((p) => onStart(p.seq as number));
      await new Promise((r) => setTimeout(r, 300)); // its LISTEN is set up asynchronously
      return {
        enqueueOne: async (seq, ms) => void (await utils.addJob('bench', { seq, ms })),
        stop: () => runner.stop(),
      };
    },
    burst: !tuned
      ? undefined
      : async (n: number) => {
          // What autovacuum leaves of a queue that drained: no rows, no dead tuples, statistics
          // of an empty table (pgdrain's burst runs on a fresh database, analyzed empty).
          await pool.query(`DELETE FROM graphile_worker._private_jobs`);
          await pool.query('VACUUM ANALYZE graphile_worker._private_jobs');
          const counter = new RunCounter(n);
          const runner = await start((p) => counter.hit(p.i as number));
          const loader = await pool.connect();
          try {
            await new Promise((r) => setTimeout(r, 3_000)); // idle: its LISTEN set up, a few empty polls
            await loader.query('BEGIN');
            for (let s = 0; s < n; s += 10_000)
              await loader.query(
                `SELECT graphile_worker.add_jobs(ARRAY(
               SELECT ROW('bench', json_build_object('i', i), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
                 FROM generate_series($1::int, $2::int - 1) AS i))`,
                [s, Math.min(n, s + 10_000)],
              );
            const t0 = now();
            await loader.query('COMMIT');
            await counter.done();
            const seconds = (now() - t0) / 1000;
            const [missing, duplicated] = counter.check();
            if (missing || duplicated)
              throw new Error(`graphile-worker burst: ${missing} jobs never ran and ${duplicated} ran twice`);
            return n / seconds;
          } finally {
            loader.release();
            await runner.stop();
          }
        },
    async seedHistory(n) {
      await utils.addJob('bench', { i: -1 }, { runAt: new Date(Date.now() + 3.6e9) }); // makes sure the task row exists
      await pool.query(`DELETE FROM graphile_worker._private_jobs`);
      await pool.query(
        `INSERT INTO graphile_worker._private_jobs (task_id, payload, attempts, max_attempts, last_error)
         SELECT (SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'bench'), '{}', 25, 25, 'boom'
           FROM generate_series(1, $1::int)`,
        [n],
      );
    },
    async close() {
      await utils.release();
      await pool.end();
    },
  };
}

function graphileSilentLogger() {
  // graphile-worker's Logger takes a factory of log functions; nothing is printed during the benchmark.
  const { Logger } = createRequire(import.meta.url)('graphile-worker') as typeof import('graphile-worker');
  return new Logger(() => () => {});
}

// --- pg-boss, tuned -----------------------------------------------------------------------------
export function pgBossSystem(): BenchSystem {
  let boss: import('pg-boss').PgBoss;
  let pool: pg.Pool;
  // A batch's jobs side by side: a slow one does not keep the rest of its batch from starting.
  const work = (onJob: (data: WakePayload) => void) =>
    boss.work<WakePayload>(
      'bench',
      { batchSize: 50, localConcurrency: 4, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
      async (jobs) => {
        await Promise.all(
          jobs.map((job) => {
            onJob(job.data);
            return takeTime(job.data);
          }),
        );
      },
    );
  return {
    name: 'pg-boss tuned',
    version: version('pg-boss'),
    table: 'pgboss.job_common',
    async install(url) {
      const { PgBoss } = await import('pg-boss');
      boss = new PgBoss({ connectionString: url, max: 10, schedule: false, useListenNotify: true });
      boss.on('error', () => {});
      await boss.start();
      await boss.createQueue('bench', { notify: true });
      pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
    },
    async reset() {
      await pool.query(`DELETE FROM pgboss.job WHERE state <> 'failed'`);
    },
    async enqueue(n) {
      for (let s = 0; s < n; s += 10_000) {
        await boss.insert(
          'bench',
          payloads(Math.min(10_000, n - s)).map((p) => ({ data: { i: p.i + s } })),
        );
      }
    },
    async drain(counter) {
      await work((d) => counter.hit(d.i as number));
      await counter.done();
      await boss.offWork('bench');
    },
    async idle(onStart) {
      await work((d) => onStart(d.seq as number));
      await new Promise((r) => setTimeout(r, 300));
      return {
        enqueueOne: async (seq, ms) => void (await boss.send('bench', { seq, ms })),
        stop: () => boss.offWork('bench'),
      };
    },
    async seedHistory(n) {
      await pool.query(
        `INSERT INTO pgboss.job (name, data, state) SELECT 'bench', '{}', 'failed' FROM generate_series(1, $1::int)`,
        [n],
      );
    },
    async close() {
      await boss.stop({ graceful: false, wait: true } as never);
      await pool.end();
    },
  };
}

// --- the article's design, literally: 4 workers, batches of 20, one DELETE per job ---------------
export function articleSystem(): BenchSystem {
  let url: string;
  let pool: pg.Pool;
  const CLAIM = `UPDATE article_jobs SET status='running', locked_at=now(), locked_by=$2, attempts=attempts+1
                  WHERE id IN (SELECT id FROM article_jobs WHERE status='pending' AND run_at <= now()
                                ORDER BY run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
                  RETURNING id, kind, payload, attempts, max_attempts`;
  const runWorkers = (onJob: (payload: WakePayload) => void) => {
    let stopped = false;
    let woken: (() => void) | null = null;
    const listener = new pg.Client({ connectionString: url });
    const ready = listener.connect().then(async () => {
      listener.on('notification', () => woken?.());
      await listener.query('LISTEN jobs');
    });
    const workers = [1, 2, 3, 4].map(async (n) => {
      const conn = new pg.Client({ connectionString: url });
      await conn.connect();
      while (!stopped) {
        const { rows } = await conn.query(CLAIM, [20, `worker-${n}`]);
        for (const row of rows) {
          onJob(row.payload);
          await takeTime(row.payload);
          await conn.query('DELETE FROM article_jobs WHERE id = $1', [row.id]);
        }
        if (rows.length === 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 1000); // the poll is the backstop
            woken = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
      }
      await conn.end();
    });
    return {
      ready,
      stop: async () => {
        stopped = true;
        woken?.();
        await Promise.all(workers);
        await listener.end();
      },
    };
  };
  return {
    name: "article's design",
    version: 'article',
    table: 'article_jobs',
    async install(u) {
      url = u;
      pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      await pool.query(`CREATE TABLE article_jobs (
        id bigserial PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL, run_at timestamptz NOT NULL DEFAULT now(),
        attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3, locked_at timestamptz, locked_by text,
        status text NOT NULL DEFAULT 'pending', last_error text, created_at timestamptz NOT NULL DEFAULT now())`);
      await pool.query(`CREATE INDEX article_jobs_ready ON article_jobs (run_at, id) WHERE status = 'pending'`);
    },
    async reset() {
      await pool.query(`DELETE FROM article_jobs WHERE status <> 'dead'`);
    },
    async enqueue(n) {
      for (let s = 0; s < n; s += 10_000) {
        const batch = payloads(Math.min(10_000, n - s)).map((p) => JSON.stringify({ i: p.i + s }));
        await pool.query(
          `INSERT INTO article_jobs (kind, payload) SELECT 'bench', p::jsonb FROM unnest($1::text[]) AS p`,
          [batch],
        );
      }
    },
    async drain(counter) {
      const workers = runWorkers((p) => counter.hit(p.i as number));
      await workers.ready;
      await counter.done();
      await workers.stop();
    },
    async idle(onStart) {
      const workers = runWorkers((p) => onStart(p.seq as number));
      await workers.ready;
      return {
        enqueueOne: async (seq, ms) => {
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            await client.query(`INSERT INTO article_jobs (kind, payload) VALUES ('bench', $1)`, [
              JSON.stringify({ seq, ms }),
            ]);
            await client.query(`SELECT pg_notify('jobs', 'bench')`);
            await client.query('COMMIT');
          } finally {
            client.release();
          }
        },
        stop: workers.stop,
      };
    },
    async seedHistory(n) {
      await pool.query(
        `INSERT INTO article_jobs (kind, payload, status, attempts, last_error) SELECT 'bench', '{}', 'dead', 3, 'boom' FROM generate_series(1, $1::int)`,
        [n],
      );
    },
    close: () => pool.end(),
  };
}

export const now = () => performance.now();
