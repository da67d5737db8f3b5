// The Cloudflare Worker: `fetch` serves the HTTP API and the dashboard, `scheduled` (the cron
// trigger) evaluates the schedules and drains until the invocation's budget is spent (releasing
// what it claimed but did not start), while beside it it reaps stale locks, folds old per-minute
// counts into the totals and prunes kept jobs whose time is up; it logs one JSON line. Each
// request and invocation opens its own connection (database.ts: Hyperdrive when bound, else Neon)
// and closes it when done. Settings come from the env through the one
// settings schema (src/settings.ts); an unusable one makes the API answer 503 naming it.
//
// The deployed entry is src/worker/index.ts; build your own with your job kinds:
//   export default createWorker({ jobs: [sendReceipt] });
import type { Context } from 'hono';
import { safeErrorMessage } from '../db/url.ts';
import { type AttemptFailed, DrainSession, drain, drainIn, type DrainReport, noneSettled } from '../drain/index.ts';
import { type ApiRuntime, createApp } from '../http/app.ts';
import { createDefaultRegistry, type JobDefinition, type JobRegistry } from '../jobs/index.ts';
import {
  type HousekeptRound,
  apiConfigFor,
  drainAgainAt,
  drainOptionsFor,
  housekeepingRound,
  registerKinds,
  registryFor,
} from '../runtime/core.ts';
import { evaluateSchedules, msUntilNextSlot, type ScheduleDefinition } from '../schedules.ts';
import { type SettingVariables, type Settings, SettingsError, readSettings } from '../settings.ts';
import { type OpenTelemetryApi, useOpenTelemetry } from '../open-telemetry.ts';
import {
  type AlarmLook,
  type ClockEnv,
  type QueueClockApi,
  earliest,
  leaseTeller,
  queueClock,
  queueClockClass,
  tellQueueClock,
} from './clock.ts';
import { attemptFailureLog } from '../runtime/attempt-failures.ts';
import { cronBudgetMs } from './cron-budget.ts';
import { type DatabaseEnv, type WorkerDatabase, openWorkerDatabase } from './database.ts';

/** The Worker's bindings: every setting the Worker reads (src/settings.ts: its variable, as a var or
 * a secret — API_TOKEN, API_TOKENS, METRICS_TOKEN, WEBHOOK_SIGNING_SECRET and DATABASE_URL are
 * secrets), and the database's (DATABASE_URL or a HYPERDRIVE binding). */
export type Env = DatabaseEnv & ClockEnv & SettingVariables<'worker'>;

export interface ScheduledReport extends DrainReport {
  cron: string;
  /** What the invocation did with the database: drained (and housekept, when due), only
   * housekept, or nothing — the queue's clock said nothing was due (no connection opened). */
  looked: 'drain' | 'housekeeping' | 'idle';
  reaped: number;
  reapedDead: number;
  /** Kept (completed or cancelled) jobs deleted because their time was up. */
  pruned: number;
  /** Jobs enqueued by recurring schedules in this invocation. */
  scheduled: number;
  budgetMs: number;
  /** Reap, roll-up and prune, on a connection of their own beside the drain (its connection included). */
  housekeepingMs: number;
  /** The drain's id, when it drained: its jobs were `locked_by` `<drainer>:<n>` (the dashboard, GET
   * /jobs/:id), and its failed statements' lines name it. */
  drainer?: string;
}

/** The part of the runtime's ScheduledController the drainer uses. */
export interface ScheduledControllerLike {
  cron: string;
  scheduledTime: number;
}

export { DEFAULT_BUDGET_MS } from './cron-budget.ts';
/** A run-now drain ends within this: the platform gives waitUntil work 30 s after the response. */
const RUN_NOW_BUDGET_MS = 25_000;

export interface WorkerOptions {
  /** Your job kinds, next to the built-in noop and webhook. */
  jobs?: readonly JobDefinition<any>[];
  /** `import * as openTelemetry from '@opentelemetry/api'`, when your Worker registers a tracer
   * provider: a Worker cannot load it by name, so it is passed in (README, Tracing). */
  openTelemetry?: OpenTelemetryApi;
  /** Recurring schedules, evaluated by every cron invocation before it drains. */
  schedules?: readonly ScheduleDefinition[];
}

/** One env's settings and registry, worked out once per env object (an isolate keeps its env). */
interface Configured {
  settings: Settings;
  registry: JobRegistry;
  /** Says why attempts failed (`attempt_failed` lines), a few per interval for the isolate
   * (src/runtime/attempt-failures.ts). */
  attemptFailed: (failed: AttemptFailed) => void;
}

export function createWorker(options: WorkerOptions = {}) {
  const schedules = options.schedules ?? [];
  if (options.openTelemetry) useOpenTelemetry(options.openTelemetry);
  const configured = new WeakMap<object, Configured | SettingsError>();
  /** The env's settings and registry; throws SettingsError naming what is unusable. */
  const configure = (env: Env): Configured => {
    let entry = configured.get(env);
    if (!entry) {
      entry = readConfiguration(env, options.jobs ?? [], schedules);
      configured.set(env, entry);
    }
    if (entry instanceof SettingsError) throw entry;
    return entry;
  };

  const app = createApp((c: Context) =>
    apiRuntime(c, configure, schedules, (env, ids, database) => runNow(env, database, configure(env), ids)),
  );

  /** One cron invocation; resolves within the budget (plus settling), with what it did. Without
   * the clock it looks every time; with it, only when the clock says something is due or the
   * backstop interval has passed, and it tells the clock what it found next. */
  async function runScheduled(controller: ScheduledControllerLike, env: Env): Promise<ScheduledReport> {
    const config = configure(env);
    const started = Date.now();
    // Unset: until a second before this cron's next invocation (see cron-budget.ts).
    const budgetMs = config.settings.drainBudgetMs ?? cronBudgetMs(controller.cron, controller.scheduledTime, started);
    const clock = queueClock(env);
    // A clock that cannot be reached (its object failing, a platform incident) never stops the
    // backstop: the cron then looks as it would without one.
    const decision = clock
      ? await clock.decide(started, backstopMs(config)).catch(clockUnreachable)
      : LOOK_AT_EVERYTHING;
    if (!decision.drain && !decision.housekeep) return { cron: controller.cron, ...idleReport(), budgetMs };
    const label = `worker-${controller.scheduledTime}`;
    const found = await look(env, config, schedules, { ...decision, budgetMs, label, clock });
    await clock?.looked({ startedAt: started, ...lookResult(found) }).catch(clockUnreachable);
    return { cron: controller.cron, ...found.report, budgetMs };
  }

  /** The clock's alarm rang: a look in the Durable Object, for what is due. */
  const alarmLook: AlarmLook = async (env, decision) => {
    const config = configure(env as Env);
    const startedAt = Date.now();
    const budgetMs = config.settings.drainBudgetMs ?? ALARM_BUDGET_MS;
    const found = await look(env as Env, config, schedules, {
      ...decision,
      budgetMs,
      label: `worker-alarm-${startedAt}`,
      clock: queueClock(env as Env),
    });
    console.log(JSON.stringify({ event: 'clock_alarm', reason: decision.reason, ...found.report, budgetMs }));
    return { startedAt, ...lookResult(found) };
  };

  return {
    /** The HTTP API and dashboard as a Hono app, to mount in yours: `myApp.route('/queue', queue.app)`. */
    app,
    fetch: app.fetch,
    runScheduled,
    async scheduled(controller: ScheduledControllerLike, env: Env, _ctx: unknown): Promise<void> {
      try {
        const report = await runScheduled(controller, env);
        console.log(JSON.stringify({ event: 'scheduled', ...report }));
      } catch (error) {
        console.error(
          JSON.stringify({ event: 'scheduled_failed', cron: controller.cron, error: safeErrorMessage(error) }),
        );
        throw error;
      }
    },
    /** The queue's clock, a Durable Object class: `export const QueueClock = queue.QueueClock`,
     * with the binding PGDRAIN_CLOCK in wrangler.toml (docs/workers.md). */
    QueueClock: queueClockClass(alarmLook, (env) => backstopMs(configure(env as Env))),
  };
}

/** An alarm's look drains at most this long (then rings again at once if jobs are left): the
 * platform gives an alarm handler 15 minutes of wall-clock time. */
const ALARM_BUDGET_MS = 60_000;

const backstopMs = ({ settings }: Configured) => settings.backstopPollSeconds! * 1000;

/** A look at everything: what a cron does without the clock. */
const LOOK_AT_EVERYTHING = { drain: true, housekeep: true } as const;

/** The clock could not be reached: logged, and the cron looks at everything. */
const clockUnreachable = (error: unknown) => {
  console.error(JSON.stringify({ event: 'clock_unreachable', error: safeErrorMessage(error) }));
  return LOOK_AT_EVERYTHING;
};

/**
 * A log line for each statement of the drain `workerId` that failed: a settlement (its jobs stay
 * running until their leases end, then the reaper hands them on and they run again) or a claim (the
 * drain claims again at its next poll). Without them the Worker would say nothing of why a job ran
 * twice; the sidecar says the same through its incidents (src/sidecar/incidents.ts).
 */
function drainFailureLogs(workerId: string, { attemptFailed }: Configured) {
  const failed = (event: string) => (error: unknown) =>
    console.error(JSON.stringify({ event, drainer: workerId, error: safeErrorMessage(error) }));
  return {
    onSettleError: failed('settle_failed'),
    onClaimError: failed('claim_failed'),
    onAttemptFailed: attemptFailed,
  };
}

/** A cron invocation the clock let off: nothing due, nothing sent. */
const idleReport = (): Omit<ScheduledReport, 'cron' | 'budgetMs'> => ({
  ...emptyDrainReport(),
  looked: 'idle',
  reaped: 0,
  reapedDead: 0,
  pruned: 0,
  scheduled: 0,
  housekeepingMs: 0,
});

function readConfiguration(
  env: Env,
  jobs: readonly JobDefinition<any>[],
  schedules: readonly ScheduleDefinition[],
): Configured | SettingsError {
  let settings: Settings;
  try {
    settings = readSettings(env as unknown as Record<string, unknown>, 'worker');
  } catch (error) {
    if (error instanceof SettingsError) return error;
    throw error;
  }
  const attemptFailed = attemptFailureLog({
    failed: (line, message) => console.warn(JSON.stringify({ event: 'attempt_failed', ...line, message })),
    muted: (message) => console.warn(JSON.stringify({ event: 'attempt_failures_muted', message })),
  });
  return { settings, registry: registryFor(settings, jobs, schedules), attemptFailed };
}

type RunNow = (env: Env, ids: string[], database: WorkerDatabase) => Promise<void>;

/**
 * What the HTTP app needs for one request: a connection of its own, the settings, the tokens. The
 * connection is opened on first use and closed when its last user is done; run-now work started
 * by the request goes on with it after the response, instead of paying for a connection of its own
 * (the handshake is most of a run-now's wait).
 */
function apiRuntime(
  c: Context,
  configure: (env: Env) => Configured,
  schedules: readonly ScheduleDefinition[],
  runNow: RunNow,
): ApiRuntime {
  const env = c.env as Env;
  let open: { database: WorkerDatabase; users: number } | undefined;
  const use = () => {
    open ??= { database: openWorkerDatabase(env), users: 0 };
    open.users++;
    return open;
  };
  const done = (used: { database: WorkerDatabase; users: number }) => {
    if (--used.users > 0) return;
    if (open === used) open = undefined;
    c.executionCtx.waitUntil(used.database.close());
  };
  const withDb: ApiRuntime['withDb'] = async (fn) => {
    const used = use();
    try {
      return await fn(used.database.db);
    } finally {
      // Not at once: a run-now the route starts as soon as this returns takes the connection over.
      c.executionCtx.waitUntil(new Promise((resolve) => setTimeout(resolve, 0)).then(() => done(used)));
    }
  };
  let config: Configured;
  try {
    config = configure(env);
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    // Every protected route answers 503 naming the setting; open routes still work.
    return {
      withDb,
      registry: createDefaultRegistry({}),
      schedules,
      apiToken: undefined,
      misconfigured: `the Worker's ${error.message}`,
    };
  }
  return {
    withDb,
    registry: config.registry,
    schedules,
    ...apiConfigFor(config.settings),
    onError: (error, where) =>
      console.error(JSON.stringify({ event: 'request_failed', where, error: safeErrorMessage(error) })),
    runNow: (ids) => {
      const used = use();
      c.executionCtx.waitUntil(runNow(env, ids, used.database).finally(() => done(used)));
    },
    // Jobs the API made due (enqueued, retried, resumed): the clock wakes a drain at the earliest.
    jobsDue: queueClock(env) ? (at) => c.executionCtx.waitUntil(tellQueueClock(env, at)) : undefined,
  };
}

/**
 * Runs just-enqueued jobs in this invocation, after the response, through the ordinary claim
 * (restricted to their ids): a cron or another invocation that claimed one first runs it, this
 * one skips it. Failures settle as usual; if the isolate dies, the reaper returns the jobs.
 */
async function runNow(
  env: Env,
  { db, transactions }: WorkerDatabase,
  config: Configured,
  ids: string[],
): Promise<void> {
  const { settings, registry } = config;
  // The request's connection (the caller closes it).
  const clock = queueClock(env);
  const drainer = `worker-now-${crypto.randomUUID().slice(0, 8)}`;
  try {
    const report = await drain(db, registry, {
      ...drainOptionsFor(settings, 'worker'),
      transactions,
      workerId: drainer,
      ...drainFailureLogs(drainer, config),
      ids,
      batchSize: ids.length,
      concurrency: Math.min(settings.concurrency!, ids.length),
      prefetch: 0,
      // waitUntil work gets 30 s after the response; the rest is the reaper's.
      budgetMs: RUN_NOW_BUDGET_MS,
      onLeaseTaken: clock ? leaseTeller(clock) : undefined,
    });
    // A retry's backoff, a snoozed workflow, or jobs it had to leave: the clock wakes a drain for them.
    if (clock && report.nextDueAt !== null) await clock.told(report.nextDueAt).catch(() => {});
    console.log(JSON.stringify({ event: 'run_now', ids: ids.length, drainer, ...report }));
  } catch (error) {
    console.error(JSON.stringify({ event: 'run_now_failed', error: safeErrorMessage(error) }));
  }
}

/** What a look does: drain (and evaluate the schedules first), housekeep beside it, or both. */
interface LookPlan {
  drain: boolean;
  housekeep: boolean;
  budgetMs: number;
  /** The drainer's id prefix: `worker-<cron time>` or `worker-alarm-<time>`. */
  label: string;
  /** With the clock: claims report what is next due, leases taken are told. */
  clock: QueueClockApi | null;
}

/** A look's report, and what it found is next (for the clock). */
interface Look {
  report: Omit<ScheduledReport, 'cron' | 'budgetMs'>;
  /** The next moment a drain has something to do (a job due, a schedule's slot); undefined when
   * the look did not drain (it learnt nothing of the jobs: the clock keeps what it knew). */
  drainAt?: number | null;
  /** Set when it housekept: the next moment housekeeping has something to do. */
  housekeepAt?: number | null;
}

/**
 * A look at the database: evaluate the schedules and drain far from the database until the budget
 * is spent, with the housekeeping round (reap, roll-up, prune) beside the drain. A cron invocation
 * without the clock does both every time; with it, a cron or the clock's alarm does what is due.
 */
async function look(
  env: Env,
  config: Configured,
  schedules: readonly ScheduleDefinition[],
  plan: LookPlan,
): Promise<Look> {
  const { settings, registry } = config;
  const started = Date.now();
  const { db, transactions, close } = openWorkerDatabase(env);
  // Housekeeping goes beside the drain, on a connection of its own (from the transactional
  // handlers' pool, given back when done): before the drain, its connection and round trips would
  // hold the drain back (bench/NOTES.md has what they cost). Settled, it is awaited.
  const housekeeping = plan.housekeep ? housekeepBeside(transactions, settings, plan.clock !== null) : null;
  housekeeping?.catch(() => {});
  try {
    if (plan.drain) await registerOnce(db, registry);
    const scheduled = plan.drain && schedules.length > 0 ? await evaluateSchedules(db, registry, schedules) : [];
    const deadline = started + plan.budgetMs;
    const workerId = `${plan.label}-${crypto.randomUUID().slice(0, 8)}`;
    // One session for the look's drains: they share what is due again (a retry the first settled).
    const session = new DrainSession(db, registry, {
      ...drainOptionsFor(settings, 'worker'),
      workerId,
      ...drainFailureLogs(workerId, config),
      transactions,
      reportNextDue: plan.clock !== null,
      onLeaseTaken: plan.clock ? leaseTeller(plan.clock) : undefined,
    });
    const drainFor = (ms: number) => drainIn(session, { budgetMs: ms });
    let report = plan.drain ? await drainFor(deadline - Date.now()) : emptyDrainReport();
    let drained = plan.drain;
    const housekept = housekeeping ? await housekeeping : null;
    // Drain again within the budget when the core says so (runtime/core.ts): jobs the reap gave
    // back after this drain found nothing more (or with no drain: a killed invocation's, whose
    // leases ended), or a kind held back by its limits until the time they allow its next claim.
    // Retries and snoozes are the clock's to wake.
    let again = drainAgainAt(report, { handedBack: housekept?.reaped.reclaimed.length });
    while (again !== null && again < deadline - 1_000) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, again! - Date.now())));
      report = addReports(report, await drainFor(deadline - Date.now()));
      drained = true;
      again = drainAgainAt(report);
    }
    const slotIn = msUntilNextSlot(schedules);
    return {
      report: {
        ...report,
        reaped: housekept?.reaped.reclaimed.length ?? 0,
        reapedDead: housekept?.reaped.dead.length ?? 0,
        pruned: housekept?.pruned.jobs ?? 0,
        scheduled: scheduled.reduce((n, r) => n + r.enqueued, 0),
        elapsedMs: Date.now() - started,
        housekeepingMs: housekept?.housekeepingMs ?? 0,
        looked: plan.drain ? 'drain' : 'housekeeping',
        ...(plan.drain ? { drainer: workerId } : {}),
      },
      ...(drained ? { drainAt: earliest(report.nextDueAt, slotIn === null ? null : Date.now() + slotIn) } : {}),
      ...(housekept ? { housekeepAt: housekept.nextRoundAt } : {}),
    };
  } finally {
    await close();
  }
}

/** Registries whose kinds this isolate has registered (runtime/core.ts: registerKinds): once per
 * isolate — a deploy's new code comes up in new isolates —, at its first drain. A failure is tried
 * again at the next drain. */
const registered = new WeakSet<JobRegistry>();
async function registerOnce(db: WorkerDatabase['db'], registry: JobRegistry): Promise<void> {
  if (registered.has(registry)) return;
  try {
    const done = await registerKinds(db, registry, `worker-${crypto.randomUUID().slice(0, 8)}`);
    registered.add(registry);
    if (done.subscriptions > 0) console.log(JSON.stringify({ event: 'subscribed', subscriptions: done.subscriptions }));
    for (const r of done.replaced)
      console.warn(
        JSON.stringify({ event: 'kind_replaced', kind: r.kind, writtenBy: r.writtenBy, differences: r.differences }),
      );
    for (const [kind, runs] of Object.entries(done.released))
      console.log(JSON.stringify({ event: 'held_runs_released', kind, runs }));
    for (const [kind, runs] of Object.entries(done.replayed))
      console.log(JSON.stringify({ event: 'parked_runs_replayed', kind, runs }));
  } catch (error) {
    console.error(JSON.stringify({ event: 'register_failed', error: safeErrorMessage(error) }));
  }
}

/** The housekeeping round (runtime/core.ts) on a connection of its own; with the clock, it also
 * says when it next has something to do. */
async function housekeepBeside(
  transactions: WorkerDatabase['transactions'],
  settings: Settings,
  scheduleNext: boolean,
): Promise<HousekeptRound> {
  const connection = await transactions();
  let healthy = false;
  try {
    const round = await housekeepingRound(connection.db, settings, { scheduleNext });
    healthy = true;
    return round;
  } finally {
    connection.giveBack(!healthy);
  }
}

/** What a look tells the clock: only what it learnt. */
const lookResult = ({ drainAt, housekeepAt }: Look) => ({
  ...(drainAt !== undefined ? { drainAt } : {}),
  ...(housekeepAt !== undefined ? { housekeepAt } : {}),
});

const emptyDrainReport = (): DrainReport => ({
  claimed: 0,
  ...noneSettled(),
  elapsedMs: 0,
  stoppedBy: 'empty',
  nextClaimAt: null,
  nextDueAt: null,
});

/** Two drains of one invocation as one report (the second's stop and next claim). */
function addReports(a: DrainReport, b: DrainReport): DrainReport {
  return {
    claimed: a.claimed + b.claimed,
    completed: a.completed + b.completed,
    failed: a.failed + b.failed,
    dead: a.dead + b.dead,
    released: a.released + b.released,
    cancelled: a.cancelled + b.cancelled,
    lost: a.lost + b.lost,
    snoozed: a.snoozed + b.snoozed,
    unsettled: a.unsettled + b.unsettled,
    elapsedMs: a.elapsedMs + b.elapsedMs,
    stoppedBy: b.stoppedBy,
    nextClaimAt: b.nextClaimAt,
    // The second drain knows the queue as it is now, but a retry of the first may come sooner.
    nextDueAt: earliest(b.nextDueAt, a.nextDueAt !== null && a.nextDueAt > Date.now() ? a.nextDueAt : null),
  };
}
