// A job kind: what its payload must look like, how its handler runs, its limits, and the errors a
// handler throws to say how it failed. The registry (registry.ts) holds the kinds a drainer runs;
// the enqueue pipeline (enqueue.ts) checks jobs against them.
import type { z } from 'zod';
import {
  JOB_DEFAULTS,
  JOB_TIMEOUT_BOUNDS_MS,
  KIND_PATTERN,
  KIND_PATTERN_MESSAGE,
  PRIORITY_BOUNDS,
} from '../db/schema.ts';
import type { OpenTransactionConnection } from '../db/connections.ts';
import type { Backoff, ClaimedJob, ClaimLimits, Db } from '../queries/index.ts';
import { PgdrainError } from '../errors.ts';

export interface JobContext {
  job: ClaimedJob;
  /** Aborted when the handler's time is up (its timeout, or the drain's budget), when its lease is
   * lost, when someone cancels the job, or when a stopping drainer gives up on it. */
  signal: AbortSignal;
  /** Reports how far it got (small JSON, at most 8 KiB): saved with the next lease renewal, at
   * most about once a second, and shown by GET /jobs/:id and the dashboard while it runs. */
  progress(value: unknown): void;
  /** The jobs this one waited for (`after`), with their state and, where their kind keeps them,
   * their results. */
  dependencies(): Promise<{ id: string; kind: string | null; status: string | null; result: unknown }[]>;
  /** Kinds defined with `transactional: true`: the transaction the job's completion commits in.
   * Write through it, and your writes and the completion commit together or not at all. Any other
   * kind: reading it throws. */
  tx: Db;
  /** A subscribed kind's job (`on`): the event that started it; null for any other job. */
  event(): Promise<StartedBy | null>;
}

export interface JobDefinition<Payload = unknown> {
  kind: string;
  /** Validated at enqueue and again before the handler runs. */
  schema: z.ZodType<Payload>;
  /** Must be idempotent: delivery is at-least-once (retries and reaped locks run a job again).
   * What it returns is the job's result (JSON, at most 64 KiB), kept for kinds with keepCompletedSeconds. */
  handler: (payload: Payload, ctx: JobContext) => unknown;
  /** Keep a job this long once it completed or was cancelled, with its result (GET /jobs/:id,
   * waitSeconds, dependencies' results). Default 0: deleted at once (the fastest). */
  keepCompletedSeconds?: number;
  /** Run the handler inside a database transaction (ctx.tx) in which the job's completion commits:
   * exactly once for work inside PostgreSQL. It holds a connection for the handler's whole run. */
  transactional?: boolean;
  /** Default 3. */
  maxAttempts?: number;
  /** Default 30 s. A handler still running then is recorded as failed. */
  timeoutMs?: number;
  /** The longest timeout one job of this kind may ask for (an enqueue's timeoutMs): more is
   * refused at enqueue, and a longer one written in SQL is cut to this when the job runs.
   * Default: timeoutMs (a job may ask for less, never for more). */
  maxTimeoutMs?: number;
  /** This kind's visibility timeout, written to each job: a running job whose lease was not
   * renewed for this long goes back to pending. Default: the drainer's (VISIBILITY_TIMEOUT_SECONDS). */
  visibilityTimeoutSeconds?: number;
  backoff?: Backoff;
  /** This kind's default priority (-1000..1000, higher runs first); an enqueue may override it. Default 0. */
  priority?: number;
  /** Most handlers of this kind running at once in one drainer (a slow kind cannot take every
   * slot). Default: no limit beyond the drainer's own concurrency. */
  concurrency?: number;
  /** Most jobs of this kind running at once across every drainer sharing the database (sidecars,
   * Worker invocations, run-now). Default: no such limit. */
  globalConcurrency?: number;
  /** Most jobs of this kind running at once per group key, across every drainer; 1 runs a key's
   * jobs one at a time in order. Jobs without a group key are not limited by it. */
  groupConcurrency?: number;
  /** At most `limit` starts of this kind in any rolling window of `periodSeconds`, across every
   * drainer (per group key with `perGroup`). A job held back is not an attempt: it stays pending. */
  rateLimit?: RateLimit;
  /** Claims take turns across the kind's group keys — a round of the oldest ready job of each key,
   * then the next round — priority still first, across every drainer: a tenant's backlog does not
   * hold another's jobs back beyond one round. Jobs without a key take one turn together. */
  fair?: boolean;
  /** What readers of a job (the API, the CLI, the dashboard) see of its payload: a kind whose
   * payload carries secrets meant for its handler (the webhook kind's headers) hides them here.
   * Default: the payload as stored. */
  redactPayload?: (payload: unknown) => unknown;
  /** On the Worker, run every job of this kind enqueued through its HTTP API at once, in the
   * same invocation (as `"runNow": true`), instead of at the next cron. */
  eager?: boolean;
  /** Events this kind subscribes to (docs/events.md): each event of these names — sendEvent,
   * pgdrain.send_event(), POST /events — enqueues one job of this kind in the sender's
   * transaction, its payload the event's (ctx.event() says which event). */
  on?: string | readonly string[];
  /** When a job of this kind goes dead (any way: attempts spent, PermanentJobError, a timeout on its
   * last try, a lease that ran out on it, a workflow run that died), the statement that makes it
   * dead enqueues a job of this kind with `{ job: { id, kind, payload, attempts, lastError, diedAt } }`
   * (docs/events.md). Not the kind itself, directly or through a chain. */
  deadLetter?: string;
  /** A kind that needs more than a handler runs its attempts through this instead (durable
   * workflows do: defineWorkflow). Set `handler` to one that says the kind runs only in a drain. */
  runner?: KindRunner<Payload, any>;
  /** This definition's version of the kind (1 to 1,000,000; default 1). Several versions of one kind
   * may be registered side by side: a job is enqueued on the highest, and runs on the version it was
   * enqueued on, claimed only by drainers that have that version (docs/workflows.md, "Changing a
   * workflow"). */
  version?: number;
}

/** The highest version a kind may have. */
export const MAX_KIND_VERSION = 1_000_000;

/** A definition's version (1 when it names none). */
export const versionOf = (definition: Pick<JobDefinition<any>, 'version'>): number => definition.version ?? 1;

/** How a claim names the jobs of `kind` at `version` (claim.sql): the first version by the kind's
 * name alone, a later one as `kind@version`. */
export const claimName = (kind: string, version: number): string => (version === 1 ? kind : `${kind}@${version}`);

/**
 * How a kind that needs more than a handler runs in the drain — the interface durable workflows use,
 * open to any kind (docs/kinds-and-enqueueing.md, "Kinds with a runner of their own"). The drain calls
 * `attempt` where it would call the handler, with the same payload check, timeout, lease, cancel
 * and trace, and settles the job by what it resolves to.
 */
export interface KindRunner<Payload = unknown, Prepared = unknown> {
  /** Before a claim's jobs of this kind start, once for all of them (one statement where each job
   * would send its own): what each job's attempt gets, by job id. It only saves work: when it
   * fails, each attempt goes without (runtime.prepared is undefined) and does its part itself. */
  prepare?: (db: Db, jobs: readonly ClaimedJob[]) => Promise<ReadonlyMap<string, Prepared>>;
  /** One attempt. Resolve `{ completed: result }` (the job's result, as a handler returns it), or
   * `{ snoozed }` once a fenced statement of your own has ended the attempt — the job pending again
   * at `dueAt` with its attempt refunded, or waiting for something — so the drain settles nothing
   * (call runtime.beforeSettling() before that statement). Throw to fail the attempt, as a handler does. */
  attempt: (payload: Payload, ctx: JobContext, runtime: AttemptRuntime<Prepared>) => Promise<AttemptResult>;
}

export type AttemptResult =
  | { completed: unknown }
  | {
      snoozed: {
        /** When the job is due again (ms since the epoch); null: something else makes it due. */
        dueAt: number | null;
        /** Kinds of jobs the statement made ready (jobs it enqueued): the drain claims them at once. */
        readyKinds?: readonly string[];
      };
    };

/** What a runner's attempt gets of the drain that runs it. */
export interface AttemptRuntime<Prepared = unknown> {
  /** The drain's database (it commits asynchronously: a statement that must be durable says so). */
  db: Db;
  /** Connections for work in a transaction of its own, each held for one use (destroyable). */
  transactions?: OpenTransactionConnection;
  /** When the attempt is given up for its time (ms since the epoch: its timeout, clipped to the
   * drain's budget), and how long it was given when it started (ms). */
  attemptEndsAt: number;
  attemptMs: number;
  /** Saves what the attempt reported with ctx.progress() and is not saved yet. */
  saveProgress: () => Promise<void>;
  /** Before a statement of your own that may settle the job: no lease renewal races it from now,
   * and the progress is saved. Returns the release, to call once the statement has returned. */
  beforeSettling: () => Promise<() => void>;
  /** Ends the attempt without spending it: the job pending again at `until` (its lock released, its
   * attempt refunded), fenced by its lock token; return what it resolves to. Throws, settling
   * nothing, when the job is no longer held (its lease was lost, or someone cancelled it). */
  snooze: (until: Date) => Promise<AttemptResult>;
  /** What `prepare` gave this job (undefined: no prepare, or it failed). */
  prepared: Prepared | undefined;
}

/** The event that started a job of a subscribed kind. */
export interface StartedBy {
  /** The event's id (pgdrain.events). */
  id: string;
  event: string;
  key: string;
}

export interface RateLimit {
  limit: number;
  periodSeconds: number;
  /** Count each group key's starts apart (jobs without a key share one window). */
  perGroup?: boolean;
}

/** What limits a kind across drainers, if anything (the claim enforces it in the database). */
export type KindLimits = ClaimLimits;

/** The handler's timeout for `job`: its own (an enqueue's timeoutMs), at most its kind's
 * maxTimeoutMs, else its kind's timeoutMs. */
export function handlerTimeoutMs(definition: JobDefinition<any>, jobTimeoutMs: number | null | undefined): number {
  const kindTimeout = definition.timeoutMs ?? JOB_DEFAULTS.timeoutMs;
  return jobTimeoutMs == null ? kindTimeout : Math.min(jobTimeoutMs, maxTimeoutOf(definition));
}

/** The longest timeout a job of the kind may ask for. */
export const maxTimeoutOf = (definition: JobDefinition<any>): number =>
  definition.maxTimeoutMs ?? definition.timeoutMs ?? JOB_DEFAULTS.timeoutMs;

/** The limits of a kind that has any, else null: such kinds are claimed under their own lock. */
export function limitsOf(definition: JobDefinition<any> | undefined): KindLimits | null {
  if (!definition) return null;
  const { globalConcurrency, groupConcurrency, rateLimit, fair } = definition;
  if (globalConcurrency === undefined && groupConcurrency === undefined && rateLimit === undefined && fair !== true)
    return null;
  return { globalConcurrency, groupConcurrency, rateLimit, ...(fair === true ? { fair: true } : {}) };
}

/** The longest rolling window a rate limit may have. */
export const MAX_RATE_PERIOD_SECONDS = 86_400;
/** A rate limit's period is at least a millisecond: a shorter window holds no start, no limit at all. */
export const MIN_RATE_PERIOD_SECONDS = 0.001;
/** A rate limit's period in seconds, within its bounds. */
export const isRatePeriod = (p: unknown): p is number =>
  typeof p === 'number' && p >= MIN_RATE_PERIOD_SECONDS && p <= MAX_RATE_PERIOD_SECONDS;

/** keepCompletedSeconds at most: 30 days. */
export const MAX_KEEP_SECONDS = 30 * 86_400;
export { KIND_PATTERN };

export function defineJob<Payload>(definition: JobDefinition<Payload>): JobDefinition<Payload> {
  if (!KIND_PATTERN.test(definition.kind)) {
    throw new Error(`job kind ${JSON.stringify(definition.kind)}: ${KIND_PATTERN_MESSAGE}`);
  }
  const { min, max } = PRIORITY_BOUNDS;
  if (
    definition.priority !== undefined &&
    !(Number.isInteger(definition.priority) && definition.priority >= min && definition.priority <= max)
  ) {
    throw new Error(`job kind ${definition.kind}: priority must be an integer from ${min} to ${max}`);
  }
  const positiveInteger = (name: string, value: unknown) => {
    if (value !== undefined && !(Number.isInteger(value) && (value as number) >= 1)) {
      throw new Error(`job kind ${definition.kind}: ${name} must be a positive integer, not ${JSON.stringify(value)}`);
    }
  };
  positiveInteger('concurrency', definition.concurrency);
  if (
    definition.version !== undefined &&
    !(Number.isInteger(definition.version) && definition.version >= 1 && definition.version <= MAX_KIND_VERSION)
  )
    throw new Error(
      `job kind ${definition.kind}: version must be a whole number from 1 to ${MAX_KIND_VERSION}, ` +
        `not ${JSON.stringify(definition.version)}`,
    );
  for (const name of ['timeoutMs', 'maxTimeoutMs'] as const) {
    const ms = definition[name];
    if (
      ms !== undefined &&
      !(Number.isInteger(ms) && ms >= JOB_TIMEOUT_BOUNDS_MS.min && ms <= JOB_TIMEOUT_BOUNDS_MS.max)
    ) {
      throw new Error(
        `job kind ${definition.kind}: ${name} must be a whole number of milliseconds ` +
          `from ${JOB_TIMEOUT_BOUNDS_MS.min} to ${JOB_TIMEOUT_BOUNDS_MS.max}, not ${JSON.stringify(ms)}`,
      );
    }
  }
  if (
    definition.maxTimeoutMs !== undefined &&
    definition.maxTimeoutMs < (definition.timeoutMs ?? JOB_DEFAULTS.timeoutMs)
  ) {
    throw new Error(
      `job kind ${definition.kind}: maxTimeoutMs (${definition.maxTimeoutMs}) is below its timeoutMs ` +
        `(${definition.timeoutMs ?? JOB_DEFAULTS.timeoutMs})`,
    );
  }
  const keep = definition.keepCompletedSeconds;
  if (keep !== undefined && !(Number.isInteger(keep) && keep >= 0 && keep <= MAX_KEEP_SECONDS)) {
    throw new Error(
      `job kind ${definition.kind}: keepCompletedSeconds must be a whole number of seconds from 0 ` +
        `to ${MAX_KEEP_SECONDS}, not ${JSON.stringify(keep)}`,
    );
  }
  checkEvents(definition);
  noteSubscriber(definition);
  if (definition.fair !== undefined && typeof definition.fair !== 'boolean')
    throw new Error(`job kind ${definition.kind}: fair must be true or false, not ${JSON.stringify(definition.fair)}`);
  positiveInteger('globalConcurrency', definition.globalConcurrency);
  positiveInteger('groupConcurrency', definition.groupConcurrency);
  if (definition.rateLimit !== undefined) {
    const { limit, periodSeconds } = definition.rateLimit;
    positiveInteger('rateLimit.limit', limit);
    if (!isRatePeriod(periodSeconds)) {
      throw new Error(
        `job kind ${definition.kind}: rateLimit.periodSeconds must be a number of seconds from ` +
          `${MIN_RATE_PERIOD_SECONDS} to ${MAX_RATE_PERIOD_SECONDS}, not ${JSON.stringify(periodSeconds)}`,
      );
    }
  }
  return definition;
}

/** Kinds defined in this process that subscribe to each event (`on`), by event then kind: sendEvent
 * checks an event's payload against their schemas before it sends (docs/events.md). */
const subscribersByEvent = new Map<string, Map<string, JobDefinition<any>>>();

/** The kinds defined in this process that subscribe to `event`. */
export const definedSubscribersOf = (event: string): JobDefinition<any>[] => [
  ...(subscribersByEvent.get(event)?.values() ?? []),
];

function noteSubscriber(definition: JobDefinition<any>): void {
  for (const event of eventsOf(definition)) {
    const kinds = subscribersByEvent.get(event) ?? new Map<string, JobDefinition<any>>();
    kinds.set(definition.kind, definition);
    subscribersByEvent.set(event, kinds);
  }
}

/** The events a kind subscribes to, as a list (none: empty). */
export const eventsOf = (definition: JobDefinition<any> | undefined): readonly string[] =>
  definition?.on === undefined ? [] : typeof definition.on === 'string' ? [definition.on] : definition.on;

function checkEvents(definition: JobDefinition<any>): void {
  const on = definition.on;
  if (on !== undefined && typeof on !== 'string' && !Array.isArray(on))
    throw new Error(`job kind ${definition.kind}: on must be an event name or a list of them`);
  const { deadLetter } = definition;
  if (deadLetter !== undefined && (typeof deadLetter !== 'string' || !KIND_PATTERN.test(deadLetter)))
    throw new Error(`job kind ${definition.kind}: deadLetter: ${KIND_PATTERN_MESSAGE}`);
  if (deadLetter === definition.kind) throw new Error(`job kind ${definition.kind}: it cannot be its own deadLetter`);
  for (const event of eventsOf(definition)) {
    if (typeof event !== 'string' || !KIND_PATTERN.test(event))
      throw new Error(
        `job kind ${definition.kind}: on: ${JSON.stringify(event)}: an event's name is ${KIND_PATTERN_MESSAGE}`,
      );
  }
}

/** A failure that retrying cannot fix: the job goes straight to dead. */
export class PermanentJobError extends PgdrainError {
  override name = 'PermanentJobError';
  readonly code = 'permanent_failure';
}

/** A failure to retry no sooner than `retryAfterSeconds` (for example an HTTP Retry-After). */
export class RetryLaterError extends PgdrainError {
  override name = 'RetryLaterError';
  readonly code = 'retry_later';
  retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds: number) {
    super(message);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** `invalid_request`: an option outside what the kind allows (a 400, as a bound of the request's
 * own would be); the others are the kind refusing the job (422). */
export type JobValidationCode = 'unknown_kind' | 'invalid_payload' | 'invalid_option' | 'invalid_request';

export class JobValidationError extends PgdrainError {
  override name = 'JobValidationError';
  code: JobValidationCode;
  /** Of several jobs enqueued together, the one refused (its index). */
  index?: number;
  constructor(code: JobValidationCode, message: string) {
    super(message);
    this.code = code;
  }
}

/** "payload.url: Invalid URL; payload.method: …" — names each field that was wrong. */
export function describeIssues(error: z.ZodError, prefix = 'payload'): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${[prefix, ...i.path.map(String)].join('.')}: ${i.message}`)
    .join('; ');
}

/** What the enqueue pipeline needs of a registry: the kinds it has. */
export interface KindLookup {
  get(kind: string): JobDefinition | undefined;
  kinds(): string[];
}
