// The self-hosted drainer: the shared queries over node-postgres, woken by LISTEN/NOTIFY within
// milliseconds, a poll as the backstop, a reaper on a timer, and the same Hono app as the Worker.
//
//   idle ──NOTIFY / poll tick / reaper reclaimed / listener (re)connected──► draining
//   draining ──drain() returned, nothing new arrived meanwhile──► idle
//   any ──stop()──► stop claiming; in-flight handlers get `shutdownGraceMs`; unstarted claimed
//                   jobs are released; HTTP, listener, pool and embedded server close.
//
// Database errors never end the process: a failing drain is retried after a pause, and each
// incident is logged once when it starts and once when it ends.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { serve } from '@hono/node-server';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Logger } from 'pino';
import { ensureDataDir, readOrCreateSecret } from '../db/data-dir.ts';
import { startEmbeddedPostgres, type EmbeddedServer } from '../db/embedded.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { redactUrl, safeErrorMessage } from '../db/url.ts';
import { createApp, type ScopedToken } from '../http/app.ts';
import { createDefaultRegistry, type JobDefinition, type JobRegistry } from '../jobs/index.ts';
import { type Db, NOTIFY_CHANNEL, reap, rollUpCounts } from '../queries/index.ts';
import { DEFAULT_BATCH_SIZE, DEFAULT_CLAIMS_IN_FLIGHT, DEFAULT_CONCURRENCY, Drainer, createDrainPool } from './drainer.ts';
import { DEFAULT_VISIBILITY_SECONDS } from '../drain.ts';
import { checkSchedules, evaluateSchedules, msUntilNextSlot, type ScheduleDefinition } from '../schedules.ts';
import { NotificationListener } from './listener.ts';
import { createLogger, type LogFormat } from './logger.ts';

/** How often the sidecar returns expired locks. */
export const DEFAULT_REAP_INTERVAL_MS = 15_000;

export interface SidecarOptions {
  /** Your PostgreSQL. Unset: an embedded PostgreSQL 18 with its data in `dataDir`. */
  databaseUrl?: string;
  /** Embedded database, generated token. Default ./.pgdrain */
  dataDir?: string;
  /** Your job kinds, served next to the built-in noop and webhook kinds. */
  jobs?: readonly JobDefinition<any>[];
  /** Recurring schedules, evaluated at start, at each of their slots and at least every minute. */
  schedules?: readonly ScheduleDefinition[];
  /** Replaces the default registry entirely (jobs is then ignored). */
  registry?: JobRegistry;
  /** Comma-separated allow-list for the webhook kind. */
  webhookAllowedHosts?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** Default 127.0.0.1; use 0.0.0.0 to serve other machines. */
  host?: string;
  /** Unset: generated once and kept in `dataDir/api-token`. */
  apiToken?: string;
  /** A second token that can read /metrics only (for a Prometheus scraper). The API token works too. */
  metricsToken?: string;
  /** Tokens limited to a scope: `enqueue`, `read` or `admin` (the API token is admin). */
  scopedTokens?: readonly ScopedToken[];
  /** The dashboard shows the oldest ready job's age in a warning colour past this. Default 60 s. */
  oldestReadyWarnSeconds?: number;
  /** Count completions and failures in job_counts (the dashboard's chart, the /metrics counters).
   * Default true; it costs a few per cent of drain throughput (see the README's benchmark). */
  recordCounts?: boolean;
  /** Most jobs per claim. Default DEFAULT_BATCH_SIZE. */
  batchSize?: number;
  /** Handlers running at once. Default DEFAULT_CONCURRENCY. */
  concurrency?: number;
  /** Claim only these kinds. Default: every registered kind. */
  kinds?: readonly string[];
  /** Default 1000 ms. */
  pollIntervalMs?: number;
  /** Default 15 s: with the 30 s visibility timeout, a crashed drainer's jobs are claimable again
   * within about 45 s. */
  reapIntervalMs?: number;
  /** Default 30 s; a job's own visibility_seconds wins. Running jobs' leases are renewed every
   * third of it, so it need not exceed the slowest job. */
  visibilityTimeoutSeconds?: number;
  /** Default 10 s. */
  shutdownGraceMs?: number;
  /** Connections for queries and the API. Default 10. */
  poolSize?: number;
  maxBodyBytes?: number;
  /** Default: pino at LOG_LEVEL (info) to stdout, readable on a terminal and JSON otherwise. */
  logger?: Logger;
  /** Overrides the choice by terminal: `json` or `pretty` (LOG_FORMAT). */
  logFormat?: LogFormat;
  /** Where the generated token's first-run banner goes. Default: stdout. */
  printBanner?: (text: string) => void;
  /** Extra server settings for the embedded PostgreSQL (tests turn fsync off). */
  embeddedSettings?: Record<string, string | number>;
}

export interface Sidecar {
  /** The HTTP API's base URL. */
  url: string;
  port: number;
  /** The database in use (with its password), for your own code: never log it. */
  databaseUrl: string;
  db: Db;
  registry: JobRegistry;
  /** Asks for a drain now (the same as a NOTIFY). */
  wake(): void;
  /** Graceful: resolves when everything is closed. */
  stop(): Promise<void>;
}

export async function startSidecar(options: SidecarOptions = {}): Promise<Sidecar> {
  const log = options.logger ?? createLogger({ level: process.env.LOG_LEVEL, format: options.logFormat });
  const dataDir = path.resolve(options.dataDir ?? '.pgdrain');
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  const pollIntervalMs = options.pollIntervalMs ?? 1000;
  const reapIntervalMs = options.reapIntervalMs ?? DEFAULT_REAP_INTERVAL_MS;
  const visibility = options.visibilityTimeoutSeconds ?? DEFAULT_VISIBILITY_SECONDS;
  const graceMs = options.shutdownGraceMs ?? 10_000;
  const workerId = `sidecar-${os.hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;

  let embedded: EmbeddedServer | undefined;
  let databaseUrl = options.databaseUrl;
  if (!databaseUrl) {
    await ensureDataDir(dataDir);
    const password = await readOrCreateSecret(path.join(dataDir, 'postgres-password'));
    embedded = await startEmbeddedPostgres({
      dataDir: path.join(dataDir, 'postgres'),
      password,
      settings: options.embeddedSettings,
      onLog: (line) => log.debug({ postgres: line.trim() }, 'embedded postgres'),
    });
    databaseUrl = embedded.url;
    log.info({ database: redactUrl(databaseUrl), dataDir }, 'embedded PostgreSQL started');
  }

  let apiToken = options.apiToken;
  let generatedTokenFile: string | null = null;
  if (!apiToken) {
    await ensureDataDir(dataDir);
    const tokenFile = path.join(dataDir, 'api-token');
    const existed = existsSync(tokenFile);
    apiToken = await readOrCreateSecret(tokenFile);
    if (existed) log.info({ tokenFile }, 'API token read from the data folder');
    else log.info({ tokenFile }, 'API token generated and saved; it is printed once below');
    if (!existed) generatedTokenFile = tokenFile;
  }

  try {
    await migrateDatabase(databaseUrl);
  } catch (error) {
    await embedded?.stop();
    throw new Error(`migrations failed on ${redactUrl(databaseUrl)}: ${error instanceof Error ? error.message : String(error)}`);
  }

  // One log line when trouble starts, one when it ends; nothing per failed poll in between.
  const incidents = {
    open: new Map<string, number>(),
    start(what: string, error: unknown) {
      if (this.open.has(what)) return void this.open.set(what, (this.open.get(what) ?? 0) + 1);
      this.open.set(what, 1);
      // The server shutting down or restarting (57P01-57P03: an administrator's command, a crash
      // recovery, a start-up) is expected in operation, and at our own shutdown when Ctrl-C reaches
      // the embedded server first: a warning, not an error.
      const code = (error as { code?: unknown } | null)?.code;
      const level = typeof code === 'string' && /^57P0[123]$/.test(code) ? 'warn' : 'error';
      log[level]({ err: describe(error) }, `${what}: database error; retrying quietly until it recovers`);
    },
    end(what: string) {
      const count = this.open.get(what);
      if (count === undefined) return;
      this.open.delete(what);
      log.info({ failures: count }, `${what}: database reachable again`);
    },
  };

  const pool = new pg.Pool({ connectionString: databaseUrl, max: options.poolSize ?? 10, application_name: 'pgdrain' });
  pool.on('error', (error) => incidents.start('pool', error)); // idle client lost: the pool replaces it
  const db = drizzle({ client: pool }) as unknown as Db;
  const drainPool = createDrainPool(databaseUrl);
  drainPool.on('error', (error) => incidents.start('pool', error));
  const drainDb = drizzle({ client: drainPool }) as unknown as Db;
  const registry = options.registry ?? createDefaultRegistry({ WEBHOOK_ALLOWED_HOSTS: options.webhookAllowedHosts }, options.jobs ?? []);
  const schedules = options.schedules ?? [];
  checkSchedules(registry, schedules);

  // --- draining ---------------------------------------------------------------------------------
  const drainer = new Drainer(drainDb, registry, {
    workerId,
    batchSize,
    concurrency,
    claimsInFlight: DEFAULT_CLAIMS_IN_FLIGHT,
    kinds: options.kinds,
    pollIntervalMs,
    visibilitySeconds: visibility,
    recordCounts: options.recordCounts,
    onSettleError: (error) => incidents.start('settle', error),
    onError: (error) => incidents.start('drain', error),
    onRecovered: () => incidents.end('drain'),
    onReport: (r) => {
      if (r.claimed === 0) return;
      log[r.dead > 0 || r.lost > 0 ? 'warn' : 'debug']({ ...r }, 'drained');
    },
  }).start();
  const wake = () => drainer.wake();

  // --- LISTEN/NOTIFY ----------------------------------------------------------------------------
  const listener = new NotificationListener({
    connectionString: databaseUrl,
    channel: NOTIFY_CHANNEL,
    onNotify: (kind) => {
      if (!options.kinds || options.kinds.includes(kind)) wake();
    },
    onUp: () => {
      log.info('listener up: waking on NOTIFY');
      wake(); // anything announced while we were not listening
    },
    onDown: (error) => log.warn({ err: describe(error) }, 'listener down: reconnecting; the poll keeps jobs moving meanwhile'),
  });
  listener.start();

  // --- reaper (and the fold of old per-minute counts into the totals) ---------------------------
  const reapNow = async () => {
    try {
      const result = await reap(drainDb, visibility);
      await rollUpCounts(drainDb);
      incidents.end('reaper');
      const total = result.reclaimed.length + result.dead.length;
      if (total > 0) {
        log.warn({ reclaimed: result.reclaimed.length, dead: result.dead.length }, `reaped ${total} jobs whose lock had expired`);
        wake();
      }
    } catch (error) {
      incidents.start('reaper', error);
    }
  };
  await reapNow(); // a previous process may have died holding locks
  const reaper = setInterval(() => void reapNow(), reapIntervalMs);

  // --- recurring schedules: at start, then at the soonest next slot (at least every minute) ------
  let scheduleTimer: ReturnType<typeof setTimeout> | undefined;
  let schedulesStopped = false;
  let evaluating: Promise<void> = Promise.resolve();
  const evaluateNow = () => (evaluating = evaluateOnce());
  const evaluateOnce = async () => {
    try {
      const reports = await evaluateSchedules(drainDb, registry, schedules);
      incidents.end('schedules');
      for (const r of reports) {
        if (r.skipped > 0) log.warn({ schedule: r.name, enqueued: r.enqueued, skipped: r.skipped }, 'schedule: missed slots beyond its backfill window were skipped');
        else if (r.enqueued > 0) log.debug({ schedule: r.name, enqueued: r.enqueued }, 'schedule: enqueued');
      }
    } catch (error) {
      incidents.start('schedules', error);
    }
    if (schedulesStopped) return;
    // A little after the slot, so the database's clock has reached it too.
    const wait = Math.min(60_000, (msUntilNextSlot(schedules) ?? 60_000) + 50);
    scheduleTimer = setTimeout(() => void evaluateNow(), wait);
  };
  if (schedules.length > 0) void evaluateNow();

  // --- HTTP -------------------------------------------------------------------------------------
  const app = createApp({
    withDb: (fn) => fn(db),
    registry,
    schedules,
    apiToken,
    metricsToken: options.metricsToken,
    scopedTokens: options.scopedTokens,
    oldestReadyWarnSeconds: options.oldestReadyWarnSeconds,
    countsRecorded: options.recordCounts !== false,
    maxBodyBytes: options.maxBodyBytes,
    onError: (error, where) => log.error({ err: describe(error), where }, 'request failed'),
  });
  const host = options.host ?? '127.0.0.1';
  const server = serve({ fetch: app.fetch, port: options.port ?? 8080, hostname: host });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const port = (server.address() as { port: number }).port;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  if (generatedTokenFile) {
    (options.printBanner ?? ((text) => process.stdout.write(text)))(
      `\npgdrain generated an API token and saved it in ${generatedTokenFile}:\n\n  ${apiToken}\n\n` +
        `Try it:\n\n  curl -s -H 'Authorization: Bearer ${apiToken}' -H 'Content-Type: application/json' \\\n` +
        `    -d '{"kind":"noop","payload":{"hello":"world"}}' ${url}/jobs\n\n` +
        `The dashboard is at ${url}/ (it asks for this token).\n\n`,
    );
  }
  log.info({ url, dashboard: `${url}/`, workerId, batchSize, concurrency, kinds: options.kinds ?? registry.kinds(), schedules: schedules.map((x) => x.name), pollIntervalMs }, 'sidecar started');

  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      log.info({ graceMs }, 'shutting down: no new claims; in-flight jobs may finish');
      clearInterval(reaper);
      schedulesStopped = true;
      clearTimeout(scheduleTimer);
      await evaluating;
      const closedHttp = new Promise<void>((resolve) => server.close(() => resolve()));
      (server as unknown as { closeIdleConnections?: () => void }).closeIdleConnections?.();
      if (!(await drainer.stop(graceMs))) {
        log.warn('grace period over with handlers still running; their jobs stay locked until the reaper returns them');
      }
      await listener.stop();
      (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      await closedHttp;
      await Promise.all([pool.end().catch(() => {}), drainPool.end().catch(() => {})]);
      if (embedded) await embedded.stop();
      log.info('stopped');
    })());

  return { url, port, databaseUrl, db, registry, wake, stop };
}

/** An error for the log: message and code, never a connection string. */
function describe(error: unknown): { message: string; code?: string } {
  const code = (error as { code?: unknown } | null)?.code;
  const message = safeErrorMessage(error);
  return typeof code === 'string' ? { message, code } : { message };
}
