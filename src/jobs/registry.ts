// Job kinds: what each kind's payload must look like, how its handler runs, and its limits.
// The registry validates at enqueue (bad payloads are refused, never stored) and gives the drain
// loop each kind's handler, timeout and backoff.
import { z } from 'zod';
import { JOB_DEFAULTS, JOB_TIMEOUT_BOUNDS_MS, KIND_PATTERN, KIND_PATTERN_MESSAGE, MAX_GROUP_KEY_LENGTH, PRIORITY_BOUNDS } from '../db/schema.ts';
import type { Backoff, ClaimedJob, ClaimLimits, Db, DedupeMode, NewJob } from '../queries/index.ts';

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
  /** Written to each job: the reaper reclaims a running job after this long. Default: the reaper's. */
  visibilitySeconds?: number;
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
  /** What readers of a job (the API, the CLI, the dashboard) see of its payload: a kind whose
   * payload carries secrets meant for its handler (the webhook kind's headers) hides them here.
   * Default: the payload as stored. */
  redactPayload?: (payload: unknown) => unknown;
  /** On the Worker, run every job of this kind enqueued through its HTTP API at once, in the
   * same invocation (as `"runNow": true`), instead of at the next cron. */
  eager?: boolean;
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
  const kindTimeout = definition.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return jobTimeoutMs == null ? kindTimeout : Math.min(jobTimeoutMs, maxTimeoutOf(definition));
}

/** The longest timeout a job of the kind may ask for. */
export const maxTimeoutOf = (definition: JobDefinition<any>): number => definition.maxTimeoutMs ?? definition.timeoutMs ?? DEFAULT_TIMEOUT_MS;

/** The limits of a kind that has any, else null: such kinds are claimed under their own lock. */
export function limitsOf(definition: JobDefinition<any> | undefined): KindLimits | null {
  if (!definition) return null;
  const { globalConcurrency, groupConcurrency, rateLimit } = definition;
  return globalConcurrency === undefined && groupConcurrency === undefined && rateLimit === undefined ? null : { globalConcurrency, groupConcurrency, rateLimit };
}

/** The longest rolling window a rate limit may have. */
export const MAX_RATE_PERIOD_SECONDS = 86_400;

export const DEFAULT_TIMEOUT_MS = 30_000;
/** A per-job timeout (an enqueue's timeoutMs) lies within these. */
export const TIMEOUT_BOUNDS_MS = JOB_TIMEOUT_BOUNDS_MS;
/** keepCompletedSeconds at most: 30 days. */
export const MAX_KEEP_SECONDS = 30 * 86_400;
export const DEFAULT_MAX_ATTEMPTS = JOB_DEFAULTS.maxAttempts;
export { KIND_PATTERN };

export function defineJob<Payload>(definition: JobDefinition<Payload>): JobDefinition<Payload> {
  if (!KIND_PATTERN.test(definition.kind)) {
    throw new Error(`job kind ${JSON.stringify(definition.kind)}: ${KIND_PATTERN_MESSAGE}`);
  }
  const { min, max } = PRIORITY_BOUNDS;
  if (definition.priority !== undefined && !(Number.isInteger(definition.priority) && definition.priority >= min && definition.priority <= max)) {
    throw new Error(`job kind ${definition.kind}: priority must be an integer from ${min} to ${max}`);
  }
  const positiveInteger = (name: string, value: unknown) => {
    if (value !== undefined && !(Number.isInteger(value) && (value as number) >= 1)) {
      throw new Error(`job kind ${definition.kind}: ${name} must be a positive integer, not ${JSON.stringify(value)}`);
    }
  };
  positiveInteger('concurrency', definition.concurrency);
  for (const name of ['timeoutMs', 'maxTimeoutMs'] as const) {
    const ms = definition[name];
    if (ms !== undefined && !(Number.isInteger(ms) && ms >= TIMEOUT_BOUNDS_MS.min && ms <= TIMEOUT_BOUNDS_MS.max)) {
      throw new Error(`job kind ${definition.kind}: ${name} must be a whole number of milliseconds from ${TIMEOUT_BOUNDS_MS.min} to ${TIMEOUT_BOUNDS_MS.max}, not ${JSON.stringify(ms)}`);
    }
  }
  if (definition.maxTimeoutMs !== undefined && definition.maxTimeoutMs < (definition.timeoutMs ?? DEFAULT_TIMEOUT_MS)) {
    throw new Error(`job kind ${definition.kind}: maxTimeoutMs (${definition.maxTimeoutMs}) is below its timeoutMs (${definition.timeoutMs ?? DEFAULT_TIMEOUT_MS})`);
  }
  const keep = definition.keepCompletedSeconds;
  if (keep !== undefined && !(Number.isInteger(keep) && keep >= 0 && keep <= MAX_KEEP_SECONDS)) {
    throw new Error(`job kind ${definition.kind}: keepCompletedSeconds must be a whole number of seconds from 0 to ${MAX_KEEP_SECONDS}, not ${JSON.stringify(keep)}`);
  }
  positiveInteger('globalConcurrency', definition.globalConcurrency);
  positiveInteger('groupConcurrency', definition.groupConcurrency);
  if (definition.rateLimit !== undefined) {
    const { limit, periodSeconds } = definition.rateLimit;
    positiveInteger('rateLimit.limit', limit);
    if (!(typeof periodSeconds === 'number' && periodSeconds > 0 && periodSeconds <= MAX_RATE_PERIOD_SECONDS)) {
      throw new Error(`job kind ${definition.kind}: rateLimit.periodSeconds must be a number of seconds above 0 and at most ${MAX_RATE_PERIOD_SECONDS}, not ${JSON.stringify(periodSeconds)}`);
    }
  }
  return definition;
}

/** A failure that retrying cannot fix: the job goes straight to dead. */
export class PermanentJobError extends Error {
  override name = 'PermanentJobError';
}

/** A failure to retry no sooner than `retryAfterSeconds` (for example an HTTP Retry-After). */
export class RetryLaterError extends Error {
  override name = 'RetryLaterError';
  retryAfterSeconds: number;
  constructor(message: string, retryAfterSeconds: number) {
    super(message);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** What a caller asks to enqueue, before validation. */
export interface EnqueueRequest {
  kind: string;
  payload: unknown;
  runAt?: Date;
  maxAttempts?: number;
  dedupeKey?: string;
  /** With a dedupeKey: 'keep' (default) or 'replace' (debounce). */
  dedupeMode?: DedupeMode;
  /** Default: the kind's priority, else 0. */
  priority?: number;
  /** 1-200 characters: jobs of the kind with the same key share its groupConcurrency. */
  groupKey?: string;
  /** The handler's timeout for this job (100 ms to a day); default the kind's. */
  timeoutMs?: number;
  /** Ids of jobs it waits for: claimed once all of them completed. */
  after?: readonly string[];
}

/** `invalid_request`: an option outside what the kind allows (a 400, as a bound of the request's
 * own would be); the others are the kind refusing the job (422). */
export type JobValidationCode = 'unknown_kind' | 'invalid_payload' | 'invalid_option' | 'invalid_request';

export class JobValidationError extends Error {
  override name = 'JobValidationError';
  code: JobValidationCode;
  constructor(code: JobValidationCode, message: string) {
    super(message);
    this.code = code;
  }
}

export class JobRegistry {
  readonly #byKind = new Map<string, JobDefinition>();

  constructor(definitions: readonly JobDefinition<any>[]) {
    for (const d of definitions) {
      if (this.#byKind.has(d.kind)) throw new Error(`job kind ${d.kind} is registered twice`);
      this.#byKind.set(d.kind, d as JobDefinition);
    }
  }

  get(kind: string): JobDefinition | undefined {
    return this.#byKind.get(kind);
  }

  kinds(): string[] {
    return [...this.#byKind.keys()];
  }

  /** The kinds limited across drainers, with their limits. */
  limitedKinds(): { kind: string; limits: KindLimits }[] {
    return [...this.#byKind.values()].flatMap((d) => {
      const limits = limitsOf(d);
      return limits ? [{ kind: d.kind, limits }] : [];
    });
  }

  /** Checks kind and payload and fills in the kind's limits; throws JobValidationError. */
  prepare(request: EnqueueRequest): NewJob {
    const definition = this.#byKind.get(request.kind);
    if (!definition) {
      throw new JobValidationError(
        'unknown_kind',
        `unknown job kind ${JSON.stringify(request.kind)}; registered kinds: ${this.kinds().join(', ') || '(none)'}`,
      );
    }
    return prepareJob(definition, request);
  }
}

/** Checks the payload against the kind's schema and fills in the kind's limits; throws
 * JobValidationError. */
export function prepareJob(definition: JobDefinition<any>, request: Omit<EnqueueRequest, 'kind'>): NewJob {
  const parsed = definition.schema.safeParse(request.payload);
  if (!parsed.success) {
    throw new JobValidationError('invalid_payload', `payload rejected by kind ${definition.kind}: ${describeIssues(parsed.error)}`);
  }
  const { groupKey, timeoutMs, after } = request;
  if (groupKey !== undefined && !(typeof groupKey === 'string' && groupKey.length >= 1 && groupKey.length <= MAX_GROUP_KEY_LENGTH)) {
    throw new JobValidationError('invalid_option', `groupKey must be 1 to ${MAX_GROUP_KEY_LENGTH} characters`);
  }
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= TIMEOUT_BOUNDS_MS.min && timeoutMs <= TIMEOUT_BOUNDS_MS.max)) {
    throw new JobValidationError('invalid_option', `timeoutMs must be a whole number of milliseconds from ${TIMEOUT_BOUNDS_MS.min} to ${TIMEOUT_BOUNDS_MS.max}`);
  }
  if (timeoutMs !== undefined && timeoutMs > maxTimeoutOf(definition)) {
    throw new JobValidationError('invalid_request', `timeoutMs: kind ${definition.kind} allows a job at most ${maxTimeoutOf(definition)} ms (its maxTimeoutMs), not ${timeoutMs}`);
  }
  if (after !== undefined && after.length > 0 && request.dedupeKey !== undefined) {
    throw new JobValidationError('invalid_option', 'a job that waits for others (after) cannot also have a dedupe key');
  }
  return {
    kind: definition.kind,
    // Store what the caller sent (validated), not the parse output, so the handler's own parse
    // at run time sees the same input.
    payload: request.payload,
    runAt: request.runAt,
    maxAttempts: request.maxAttempts ?? definition.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    dedupeKey: request.dedupeKey,
    dedupeMode: request.dedupeMode,
    visibilitySeconds: definition.visibilitySeconds,
    priority: request.priority ?? definition.priority,
    groupKey: request.groupKey,
    timeoutMs: request.timeoutMs,
    keepSeconds: definition.keepCompletedSeconds || undefined,
    after: request.after,
  };
}

/** "payload.url: Invalid URL; payload.method: …" — names each field that was wrong. */
export function describeIssues(error: z.ZodError, prefix = 'payload'): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${[prefix, ...i.path.map(String)].join('.')}: ${i.message}`)
    .join('; ');
}
