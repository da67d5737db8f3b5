// What the HTTP app gets from the shell that serves it (the sidecar, the Worker, your own app), and
// what each request carries through its middleware.
import type { Context } from 'hono';
import type { JobRegistry } from '../jobs/registry.ts';
import type { Db } from '../queries/index.ts';
import type { ScheduleDefinition } from '../schedules.ts';
import { defaultFor } from '../settings.ts';
import type { ScopedToken, TokenScope } from './tokens.ts';

/** Runs `fn` with a database; the shell decides how (a shared pool, or one Pool per request). */
export type WithDb = <T>(fn: (db: Db) => Promise<T>) => Promise<T>;

export interface ApiRuntime {
  withDb: WithDb;
  registry: JobRegistry;
  /** Recurring schedules, listed by GET /schedules. */
  schedules?: readonly ScheduleDefinition[];
  /** Bearer token for every route but /healthz and the dashboard's page and assets (which hold no
   * data). Unset: the API refuses with 503, never runs open. */
  apiToken: string | undefined;
  /** A second token that can read /metrics only (the API token can too). */
  metricsToken?: string | undefined;
  /** More tokens, each limited to a scope (API_TOKENS): `enqueue` may only enqueue, `read` may
   * only read (GET routes and /metrics), `admin` may do everything, like apiToken. */
  scopedTokens?: readonly ScopedToken[];
  /** Set when the shell found its settings unusable: every protected route answers 503 with it. */
  misconfigured?: string;
  /** Runs just-enqueued jobs now, after the response (the Worker: in waitUntil). Unset: the flag
   * is accepted and the drainer's own wake-up runs them (the sidecar's NOTIFY). */
  runNow?: (ids: string[]) => void;
  /** Hears that the request made jobs due at `at` (an enqueue's earliest run time, a retry, a
   * resumed kind), after it committed: the Worker tells its clock, which wakes a drain then.
   * Unset: the drainers find them themselves (the sidecar's NOTIFY and poll, the cron). */
  jobsDue?: (at: Date) => void;
  /** Hears when a job reached a final state (the sidecar's LISTEN on pgdrain_finished), so that
   * GET /jobs/:id?waitSeconds answers at once. Unset: the wait reads the job every 250 ms. */
  finishedJobs?: FinishedJobs;
  /** The dashboard's warning threshold for the oldest ready job. Default 60 s. */
  oldestReadyWarnSeconds?: number;
  /** False when the drainer does not count settled jobs: the dashboard says why its chart is empty. */
  recordCounts?: boolean;
  /** Default: MAX_BODY_BYTES' (1 MiB). */
  maxBodyBytes?: number;
  /** Where unexpected errors go (already stripped of secrets by the caller's logger). */
  onError?: (error: unknown, where: string) => void;
}

/** Announcements of jobs that reached a final state, by id. */
export interface FinishedJobs {
  /** Calls `listener` when job `id` is announced; returns the unsubscribe function. */
  subscribe(id: string, listener: () => void): () => void;
}

export type ApiConfig = ApiRuntime | ((c: Context) => ApiRuntime);

/** The Hono environment of every route. */
export type AppEnv = {
  Variables: {
    api: ApiRuntime;
    /** Where the app is mounted: '' or e.g. '/queue'. */
    basePath: string;
    /** What the request's token may do (set by access()). */
    scope: TokenScope;
    /** The /docs page's script nonce (secureHeaders). */
    secureHeadersNonce?: string;
  };
};

/** MAX_BODY_BYTES' default (src/settings.ts). */
export const DEFAULT_MAX_BODY_BYTES = defaultFor('maxBodyBytes', 'sidecar');
