// The self-hosted drainer: the shared queries over node-postgres, woken by LISTEN/NOTIFY within
// milliseconds, a poll as the backstop, a reaper on a timer, and the same Hono app as the Worker.
// startSidecar() composes its parts, each started and stopped by Parts (parts.ts), in this order:
//
//   database  DATABASE_URL or an embedded PostgreSQL, migrated            (database.ts)
//   identity  DRAINER_ID held while it runs; an earlier process's jobs
//             of the same identity released at once                      (drainer-identity.ts)
//   pools     the API's durable pool and the drainer's async-commit pool  (database.ts)
//   drainer   drain() whenever there may be work; stop: no new claims,
//             in-flight handlers get `shutdownGraceMs`                    (drainer.ts)
//   listener  LISTEN on the queue's channels, reconnecting with backoff:  (listener.ts)
//             ready kinds wake the drainer, cancels reach running jobs,
//             finished jobs answer those waiting for them                 (finished-jobs.ts)
//   reaper    expired leases back to pending, old counts folded, kept
//             jobs pruned                                                 (reaper.ts)
//   scheduler recurring schedules at their slots                          (scheduler.ts)
//   http      the API and dashboard on a port                             (http.ts)
//
// A part that fails to start stops every part started before it; stop() stops them all, last
// first. Database errors never end the process: a failing drain is retried after a pause, and each
// incident is logged once when it starts and once when it ends (incidents.ts).
import { SettledSummary } from './settled-summary.ts';
import path from 'node:path';
import type { Logger } from 'pino';
import { DrainNotices, type OpenTransactionConnection } from '../drain/index.ts';
import { createApp } from '../http/app.ts';
import type { JobDefinition, JobRegistry } from '../jobs/index.ts';
import { type Db, reap, stopNamingStatements } from '../queries/index.ts';
import { type Pooler, type PoolerSetting, detectPooler } from '../db/pooler.ts';
import type { ScheduleDefinition } from '../schedules.ts';
import { type RuntimeSettings, type Settings, defaultFor, withDefaults } from '../settings.ts';
import { type KindsRegistered, apiConfigFor, drainOptionsFor, registerKinds, registryFor } from '../runtime/core.ts';
import { attemptFailureLog } from '../runtime/attempt-failures.ts';
import { openDatabase, openPools, resolveApiToken } from './database.ts';
import { type DrainerIdentity, holdIdentity } from './drainer-identity.ts';
import { Drainer } from './drainer.ts';
import { FinishedJobsHub } from './finished-jobs.ts';
import { serveHttp } from './http.ts';
import { Incidents, errorForLog } from './incidents.ts';
import { createLogger, logFormatFor } from './logger.ts';
import { Parts } from './parts.ts';
import { Reaper } from './reaper.ts';
import { Scheduler } from './scheduler.ts';
import { startWakeups } from './wakeups.ts';

/** How often the sidecar returns expired locks. */
export const DEFAULT_REAP_INTERVAL_MS = defaultFor('reapIntervalMs', 'sidecar');

/**
 * The sidecar's settings — each one the setting of the same name in src/settings.ts (its
 * environment variable in the README's configuration table: `batchSize` is BATCH_SIZE), its
 * default applying when it is not given — and what only code can pass.
 */
export interface SidecarOptions extends RuntimeSettings<'sidecar'> {
  /** Your job kinds, served next to the built-in noop and webhook kinds. */
  jobs?: readonly JobDefinition<any>[];
  /** Recurring schedules, evaluated at start, at each of their slots and at least every minute. */
  schedules?: readonly ScheduleDefinition[];
  /** Replaces the default registry entirely (jobs is then ignored). */
  registry?: JobRegistry;
  /** Default: pino at `logLevel` (else LOG_LEVEL) to stdout, readable on a terminal and JSON otherwise. */
  logger?: Logger;
  /** Where the first-run banner goes when a token was generated: where the token is kept and how
   * to use it (never the token itself). Default: stdout, when the log is readable lines; in JSON
   * mode the log's own line says where the token is. */
  printBanner?: (text: string) => void;
  /** Extra server settings for the embedded PostgreSQL (tests turn fsync off). */
  embeddedSettings?: Record<string, string | number>;
  /** Stops the start (a SIGTERM while it migrates or waits for another's migration): what has
   * started is stopped, and startSidecar rejects with the signal's reason. */
  signal?: AbortSignal;
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
  const log =
    options.logger ?? createLogger({ level: options.logLevel ?? process.env.LOG_LEVEL, format: options.logFormat });
  const parts = new Parts(log, options.signal);
  try {
    return await startParts(options, log, parts);
  } catch (error) {
    await parts.stopAll();
    throw error;
  }
}

async function startParts(options: SidecarOptions, log: Logger, parts: Parts): Promise<Sidecar> {
  // Every setting, the given ones and the defaults of the rest (src/settings.ts).
  const settings = withDefaults(options, 'sidecar');
  const dataDir = path.resolve(settings.dataDir!);
  const visibilityTimeoutSeconds = settings.visibilityTimeoutSeconds!;
  const schedules = options.schedules ?? [];
  const registry = registryFor(settings, options.jobs ?? [], schedules, options.registry);
  const incidents = new Incidents(log);

  const database = await parts.start('database', () =>
    openDatabase(
      {
        databaseUrl: options.databaseUrl,
        dataDir,
        embeddedSettings: options.embeddedSettings,
        embeddedPort: settings.embeddedPort,
        signal: options.signal,
      },
      log,
    ),
  );
  const pooler = await poolerInFront(database.url, settings, log);
  const apiToken = await resolveApiToken(options.apiToken, dataDir, log);
  const identity = await parts.start('identity', () =>
    holdIdentity(database.url, { given: options.drainerId, dataDir, ownSession: pooler.mode === 'none' }, log),
  );
  const { workerId } = identity;
  const pools = await parts.start('pools', () => {
    const opened = openPools(database.url, settings.poolSize!, incidents, { startupOptions: pooler.startupOptions });
    return Object.assign(opened, { stop: () => opened.close() });
  });
  await releaseEarlierProcess(pools.drainDb, identity, visibilityTimeoutSeconds, log);
  // Its kinds written now (pgdrain.kinds: an enqueue by name gets their options; events sent from SQL
  // fan out to their subscriptions); held and changed workflow runs replay on this code.
  const registered = await registerKinds(pools.db, registry, workerId);
  logRegistered(registered, log);
  const notices = new DrainNotices();
  const finishedJobs = new FinishedJobsHub();
  const drainer = await parts.start(
    'drainer',
    () =>
      startDrainer(pools.drainDb, registry, settings, {
        vacuumDb: pools.db,
        workerId,
        log,
        incidents,
        transactions: pools.transactions,
        notices,
      }),
    // Its grace period, the releases' 5 s after it, and the usual 10 s.
    { stopWithinMs: settings.shutdownGraceMs! + 15_000 },
  );
  const wake = () => drainer.wake();
  await parts.start('listener', () =>
    startWakeups(settings, database.url, pooler.mode, { notices, finishedJobs, db: pools.db }, log),
  );
  await parts.start('reaper', () =>
    new Reaper(
      pools.drainDb,
      { intervalMs: settings.reapIntervalMs!, settings, onReaped: wake },
      log,
      incidents,
    ).start(),
  );
  await parts.start('scheduler', () => new Scheduler(pools.db, registry, schedules, log, incidents).start());
  const http = await parts.start('http', () =>
    serveApi(settings, { registry, schedules, finishedJobs, apiToken: apiToken.token, db: pools.db }, log),
  );

  announceStart(options, { http, apiToken, workerId, registry, schedules, settings }, log);
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      log.info({ graceMs: settings.shutdownGraceMs }, 'shutting down: no new claims; in-flight jobs may finish');
      await parts.stopAll();
      log.info('stopped');
    })());
  return { url: http.url, port: http.port, databaseUrl: database.url, db: pools.db, registry, wake, stop };
}

/** A pooler in front of the database, and what it allows (db/pooler.ts): said once at the start. */
async function poolerInFront(url: string, settings: Settings, log: Logger): Promise<Pooler> {
  const pooler = await detectPooler(url, settings.pooler as PoolerSetting);
  if (pooler.mode === 'transaction') stopNamingStatements();
  if (pooler.mode !== 'none')
    log.info(
      { pooler: pooler.mode, how: pooler.how },
      `a ${pooler.mode}-mode pooler stands in front of the database` +
        (pooler.mode === 'transaction' ? ': statements are sent unnamed, and no session state is kept' : ''),
    );
  return pooler;
}

/** What an earlier process of this identity held (killed, say) runs again now, not after its leases. */
async function releaseEarlierProcess(db: Db, identity: DrainerIdentity, visibilityTimeoutSeconds: number, log: Logger) {
  if (!identity.earlierProcess) return;
  const released = await reap(db, visibilityTimeoutSeconds, { earlierProcess: identity.earlierProcess });
  const count = released.reclaimed.length + released.dead.length + released.cancelled.length;
  if (count > 0)
    log.info(
      { drainerId: identity.drainerId, ...released },
      'released the jobs an earlier process of this drainer held',
    );
}

/** The HTTP API (src/http) on the sidecar's own server. */
function serveApi(
  settings: Settings,
  api: {
    registry: JobRegistry;
    schedules: readonly ScheduleDefinition[];
    finishedJobs: FinishedJobsHub;
    apiToken: string;
    db: Db;
  },
  log: Logger,
) {
  const app = createApp({
    withDb: (fn) => fn(api.db),
    registry: api.registry,
    schedules: api.schedules,
    finishedJobs: api.finishedJobs,
    ...apiConfigFor(settings, api.apiToken),
    // A client that hung up mid-request is not the server's error: debug, not an operator's alarm.
    onError: (error, where) =>
      isClientHangUp(error)
        ? log.debug({ err: errorForLog(error), where }, 'client hung up mid-request')
        : log.error({ err: errorForLog(error), where }, 'request failed'),
  });
  return serveHttp(app, settings.host!, settings.port!, {
    headersTimeoutMs: settings.httpHeadersTimeoutMs!,
    requestTimeoutMs: settings.httpRequestTimeoutMs!,
    maxConnections: settings.httpMaxConnections!,
  });
}

/** The first-run banner (where a generated token is kept) and the "sidecar started" line. */
function announceStart(
  options: SidecarOptions,
  started: {
    http: { url: string };
    apiToken: { generatedIn: string | null };
    workerId: string;
    registry: JobRegistry;
    schedules: readonly ScheduleDefinition[];
    settings: Settings;
  },
  log: Logger,
) {
  const { http, settings } = started;
  const printBanner =
    options.printBanner ??
    (!options.logger && logFormatFor(options.logFormat) === 'pretty'
      ? (text: string) => process.stdout.write(text)
      : undefined);
  if (started.apiToken.generatedIn) printBanner?.(tokenBanner(started.apiToken.generatedIn, http.url));
  log.info(
    {
      url: http.url,
      dashboard: `${http.url}/`,
      workerId: started.workerId,
      batchSize: settings.batchSize,
      concurrency: settings.concurrency,
      kinds: settings.kinds && settings.kinds.length > 0 ? settings.kinds : started.registry.kinds(),
      schedules: started.schedules.map((x) => x.name),
      pollIntervalMs: settings.pollIntervalMs,
    },
    'sidecar started',
  );
}

/** The error a request's handler meets when its client closed the connection before it was done. */
function isClientHangUp(error: unknown): boolean {
  const e = error as { code?: string; message?: string; cause?: { code?: string } } | null;
  const code = e?.code ?? e?.cause?.code;
  return code === 'ECONNRESET' || code === 'EPIPE' || code === 'ERR_STREAM_PREMATURE_CLOSE' || e?.message === 'aborted';
}

/** The drain scheduler as a part: stopping it stops claiming and gives running handlers the grace period. */
function startDrainer(
  db: Db,
  registry: JobRegistry,
  settings: Settings,
  context: {
    /** Where the drainer's VACUUM of the jobs table runs: the API's pool, not one of the drain's four. */
    vacuumDb: Db;
    workerId: string;
    log: Logger;
    incidents: Incidents;
    transactions: OpenTransactionConnection;
    notices: DrainNotices;
  },
) {
  const { log, incidents } = context;
  const settled = new SettledSummary(log);
  const drainer = new Drainer(db, registry, {
    ...drainOptionsFor(settings, 'sidecar'),
    pollIntervalMs: settings.pollIntervalMs!,
    workerId: context.workerId,
    transactions: context.transactions,
    notices: context.notices,
    onSettleError: (error) => incidents.start('settle', error),
    onAttemptFailed: attemptFailureLog({
      failed: (line, message) => log.warn(line, message),
      muted: (message) => log.warn(message),
    }),
    onClaimError: (error) => incidents.start('drain', error),
    onError: (error) => incidents.start('drain', error),
    onRecovered: () => incidents.end('drain'),
    vacuumEveryJobs: settings.vacuumEveryJobs,
    vacuumDb: context.vacuumDb,
    vacuumEvents: {
      onVacuumed: (done) => log.debug(done, 'vacuumed the jobs table'),
      onHeldOff: (due) =>
        log.debug(due, 'VACUUM of the jobs table held off by another session (autovacuum, ANALYZE, an index build)'),
      onNotAllowed: () =>
        log.warn(
          'this role may not VACUUM pgdrain.jobs (not its owner): the drainer leaves it to autovacuum, and claims ' +
            'slow down between its visits on a busy queue; run pgdrain as the owner, or set VACUUM_EVERY_JOBS=0',
        ),
      onError: (error) => log.warn({ err: errorForLog(error) }, 'VACUUM of the jobs table failed; tried again later'),
    },
    onReport: (r) => {
      if (r.claimed > 0) log[r.dead > 0 || r.lost > 0 || r.unsettled > 0 ? 'warn' : 'debug']({ ...r }, 'drained');
      settled.add(r);
    },
  }).start();
  return {
    wake: () => drainer.wake(),
    stop: async () => {
      if (!(await drainer.stop(settings.shutdownGraceMs!)))
        log.warn(
          'grace period over with handlers still running: they were abandoned and their jobs released to run again',
        );
      settled.stop();
    },
  };
}

/** Where the generated token is and how to use it; the token itself is never printed (a terminal's
 * scrollback and a log collector are not places for it). */
function tokenBanner(file: string, url: string): string {
  const read = `$(cat '${file.replaceAll("'", "'\\''")}')`;
  return (
    `\npgdrain generated an API token and saved it in ${file} (readable by you only).\n\n` +
    `Try it:\n\n  curl -s -H "Authorization: Bearer ${read}" -H 'Content-Type: application/json' \\\n` +
    `    -d '{"kind":"noop","payload":{"hello":"world"}}' ${url}/jobs\n\n` +
    `The dashboard is at ${url}/ (it asks for the token: cat ${file}).\n\n`
  );
}

/** What registering the kinds changed, said once at the start. */
function logRegistered(registered: KindsRegistered, log: Logger): void {
  if (registered.subscriptions > 0) log.info({ subscriptions: registered.subscriptions }, 'kinds subscribed to events');
  for (const r of registered.replaced)
    log.warn(
      { kind: r.kind, writtenBy: r.writtenBy, writtenAt: r.writtenAt.toISOString(), differences: r.differences },
      `kind ${r.kind}: this drainer's definition replaces the one ${r.writtenBy} wrote ` +
        `(${r.differences.join('; ')}); enqueues by name now get this one`,
    );
  for (const [kind, runs] of Object.entries(registered.released))
    log.warn({ kind, runs }, 'workflow runs held by a change of their code replay on this version');
  for (const [kind, runs] of Object.entries(registered.replayed))
    log.info({ kind, runs }, 'parked workflow runs replay once on the changed code');
}
