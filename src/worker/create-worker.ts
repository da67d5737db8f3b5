// The Cloudflare Worker: `fetch` serves the HTTP API and the dashboard, `scheduled` (the cron
// trigger) reaps stale locks, folds old per-minute counts into the totals, drains until the
// invocation's budget is spent, releases what it claimed but did not start, and logs one JSON line.
// Each request and invocation opens its own connection (database.ts: Hyperdrive when bound, else
// Neon) and closes it when done.
//
// The deployed entry is src/worker/index.ts; build your own with your job kinds:
//   export default createWorker({ jobs: [sendReceipt] });
import type { Context } from 'hono';
import { DEFAULT_VISIBILITY_SECONDS, drain, type DrainReport } from '../drain.ts';
import { type ApiRuntime, createApp, parseScopedTokens, type ScopedToken } from '../http/app.ts';
import { createDefaultRegistry, type JobDefinition, type JobRegistry } from '../jobs/index.ts';
import { safeErrorMessage } from '../db/url.ts';
import { type Db, reap, rollUpCounts } from '../queries/index.ts';
import { checkSchedules, evaluateSchedules, type ScheduleDefinition } from '../schedules.ts';
import { FALLBACK_BUDGET_MS, cronBudgetMs } from './cron-budget.ts';
import { type DatabaseEnv, openWorkerDatabase } from './database.ts';

export interface Env extends DatabaseEnv {
  /** Secret: the API's bearer token (`wrangler secret put API_TOKEN`). */
  API_TOKEN?: string;
  /** Secret, optional: a token that can read /metrics only. */
  METRICS_TOKEN?: string;
  /** Secret, optional: tokens limited to a scope, `enqueue:<token>, read:<token>, admin:<token>`. */
  API_TOKENS?: string;
  /** The dashboard's warning threshold for the oldest ready job, in seconds. Default 60. */
  OLDEST_READY_WARN_SECONDS?: string;
  /** "false" stops counting completions and failures in job_counts (the chart, /metrics counters). */
  RECORD_COUNTS?: string;
  /** Wall-clock milliseconds an invocation drains. Unset: until a second before the same cron's next tick. */
  DRAIN_BUDGET_MS?: string;
  /** Jobs per claim, at least. Default 20. */
  BATCH_SIZE?: string;
  /** Claims grow up to this when handlers are quick next to the database's round trip. Default 500. */
  MAX_BATCH_SIZE?: string;
  CONCURRENCY?: string;
  VISIBILITY_TIMEOUT_SECONDS?: string;
  WEBHOOK_ALLOWED_HOSTS?: string;
  MAX_BODY_BYTES?: string;
}

export interface ScheduledReport extends DrainReport {
  cron: string;
  reaped: number;
  reapedDead: number;
  /** Jobs enqueued by recurring schedules in this invocation. */
  scheduled: number;
  budgetMs: number;
}

/** The part of the runtime's ScheduledController the drainer uses. */
export interface ScheduledControllerLike {
  cron: string;
  scheduledTime: number;
}

/** DRAIN_BUDGET_MS when it is set but unreadable. Unset, the budget follows the cron (cron-budget.ts). */
export const DEFAULT_BUDGET_MS = FALLBACK_BUDGET_MS;
const MAX_CONCURRENCY = 5; // 6 simultaneous connections per invocation, one is the database's
/** The largest claim a cron drain grows to (MAX_BATCH_SIZE overrides). */
const DEFAULT_MAX_BATCH_SIZE = 500;
/** A run-now drain ends within this: the platform gives waitUntil work 30 s after the response. */
const RUN_NOW_BUDGET_MS = 25_000;

export interface WorkerOptions {
  /** Your job kinds, next to the built-in noop and webhook. */
  jobs?: readonly JobDefinition<any>[];
  /** Recurring schedules, evaluated by every cron invocation before it drains. */
  schedules?: readonly ScheduleDefinition[];
}

export function createWorker(options: WorkerOptions = {}) {
  const schedules = options.schedules ?? [];
  const registries = new Map<string, JobRegistry>();
  const registryFor = (env: Env) => {
    const key = env.WEBHOOK_ALLOWED_HOSTS ?? '';
    let registry = registries.get(key);
    if (!registry) {
      registry = createDefaultRegistry(env, options.jobs ?? []);
      checkSchedules(registry, schedules);
      registries.set(key, registry);
    }
    return registry;
  };

  const app = createApp((c: Context): ApiRuntime => {
    const env = c.env as Env;
    return {
      withDb: async (fn) => {
        const { db, end } = openWorkerDatabase(env);
        try {
          return await fn(db);
        } finally {
          c.executionCtx.waitUntil(end());
        }
      },
      registry: registryFor(env),
      schedules,
      apiToken: env.API_TOKEN,
      metricsToken: env.METRICS_TOKEN,
      ...scopedTokensOf(env),
      oldestReadyWarnSeconds: positive(env.OLDEST_READY_WARN_SECONDS, 60),
      countsRecorded: env.RECORD_COUNTS !== 'false',
      maxBodyBytes: env.MAX_BODY_BYTES ? Number(env.MAX_BODY_BYTES) : undefined,
      onError: (error, where) => console.error(JSON.stringify({ event: 'request_failed', where, error: safeErrorMessage(error) })),
      runNow: (ids) => c.executionCtx.waitUntil(runNow(env, ids)),
    };
  });

  /**
   * Runs just-enqueued jobs in this invocation, after the response, through the ordinary claim
   * (restricted to their ids): a cron or another invocation that claimed one first runs it, this
   * one skips it. Failures settle as usual; if the isolate dies, the reaper returns the jobs.
   */
  async function runNow(env: Env, ids: string[]): Promise<void> {
    const { db, end } = openWorkerDatabase(env);
    try {
      const report = await drain(db, registryFor(env), {
        workerId: `worker-now-${crypto.randomUUID().slice(0, 8)}`,
        ids,
        batchSize: ids.length,
        concurrency: Math.min(MAX_CONCURRENCY, ids.length),
        prefetch: 0,
        // waitUntil work gets 30 s after the response; the rest is the reaper's.
        budgetMs: RUN_NOW_BUDGET_MS,
        visibilitySeconds: positive(env.VISIBILITY_TIMEOUT_SECONDS, DEFAULT_VISIBILITY_SECONDS),
        recordCounts: env.RECORD_COUNTS !== 'false',
      });
      console.log(JSON.stringify({ event: 'run_now', ids: ids.length, ...report }));
    } catch (error) {
      console.error(JSON.stringify({ event: 'run_now_failed', error: safeErrorMessage(error) }));
    } finally {
      await end();
    }
  }

  /** One cron invocation; resolves within the budget (plus settling), with what it did. */
  async function runScheduled(controller: ScheduledControllerLike, env: Env): Promise<ScheduledReport> {
    const started = Date.now();
    // Unset: until a second before this cron's next invocation (see cron-budget.ts).
    const budgetMs = env.DRAIN_BUDGET_MS ? positive(env.DRAIN_BUDGET_MS, DEFAULT_BUDGET_MS) : cronBudgetMs(controller.cron, controller.scheduledTime, started);
    const batchSize = positive(env.BATCH_SIZE, 20);
    const concurrency = Math.min(MAX_CONCURRENCY, positive(env.CONCURRENCY, MAX_CONCURRENCY));
    const { db, end } = openWorkerDatabase(env);
    try {
      const visibilitySeconds = positive(env.VISIBILITY_TIMEOUT_SECONDS, DEFAULT_VISIBILITY_SECONDS);
      const reaped = await reap(db, visibilitySeconds);
      await rollUpCounts(db);
      const scheduled = schedules.length > 0 ? await evaluateSchedules(db, registryFor(env), schedules) : [];
      const report = await drain(db, registryFor(env), {
        workerId: `worker-${controller.scheduledTime}-${crypto.randomUUID().slice(0, 8)}`,
        batchSize,
        // Far from the database, quick handlers leave the slots idle while a claim of 20 travels:
        // claims grow to what the slots finish in a round trip (drain.ts), up to MAX_BATCH_SIZE.
        maxBatchSize: Math.max(batchSize, positive(env.MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_SIZE)),
        // Each statement is a round trip to the database: completions ride the next claim.
        mergeSettleAndClaim: true,
        concurrency,
        // One batch claimed ahead keeps the slots busy across the claim's round trip; whatever is
        // still unstarted at the deadline is released with its attempt refunded.
        prefetch: batchSize,
        budgetMs: budgetMs - (Date.now() - started),
        visibilitySeconds,
        recordCounts: env.RECORD_COUNTS !== 'false',
      });
      return {
        cron: controller.cron, ...report, reaped: reaped.reclaimed.length, reapedDead: reaped.dead.length,
        scheduled: scheduled.reduce((n, r) => n + r.enqueued, 0), budgetMs, elapsedMs: Date.now() - started,
      };
    } finally {
      await end();
    }
  }

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
        console.error(JSON.stringify({ event: 'scheduled_failed', cron: controller.cron, error: safeErrorMessage(error) }));
        throw error;
      }
    },
  };
}

/** API_TOKENS, parsed once per value; an unusable value makes the API answer 503 saying why. */
const parsedTokens = new Map<string, { scopedTokens: ScopedToken[] } | { misconfigured: string }>();
function scopedTokensOf(env: Env): { scopedTokens?: ScopedToken[]; misconfigured?: string } {
  const value = env.API_TOKENS ?? '';
  let parsed = parsedTokens.get(value);
  if (!parsed) {
    try {
      parsed = { scopedTokens: parseScopedTokens(value) };
    } catch (error) {
      parsed = { misconfigured: `the API_TOKENS secret is unusable: ${error instanceof Error ? error.message : String(error)}` };
    }
    parsedTokens.set(value, parsed);
  }
  return parsed;
}

function positive(value: string | undefined, fallback: number): number {
  const n = Number(value);
  return value !== undefined && value !== '' && Number.isFinite(n) && n > 0 ? n : fallback;
}

