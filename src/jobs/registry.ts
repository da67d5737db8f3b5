// Job kinds: what each kind's payload must look like, how its handler runs, and its limits.
// The registry validates at enqueue (bad payloads are refused, never stored) and gives the drain
// loop each kind's handler, timeout and backoff.
import { z } from 'zod';
import { JOB_DEFAULTS, KIND_PATTERN, KIND_PATTERN_MESSAGE } from '../db/schema.ts';
import type { Backoff, ClaimedJob, NewJob } from '../queries/index.ts';

export interface JobContext {
  job: ClaimedJob;
  /** Aborted when the handler's time is up (its timeout, or the drain's budget). */
  signal: AbortSignal;
}

export interface JobDefinition<Payload = unknown> {
  kind: string;
  /** Validated at enqueue and again before the handler runs. */
  schema: z.ZodType<Payload>;
  /** Must be idempotent: delivery is at-least-once (retries and reaped locks run a job again). */
  handler: (payload: Payload, ctx: JobContext) => Promise<void> | void;
  /** Default 3. */
  maxAttempts?: number;
  /** Default 30 s. A handler still running then is recorded as failed. */
  timeoutMs?: number;
  /** Written to each job: the reaper reclaims a running job after this long. Default: the reaper's. */
  visibilitySeconds?: number;
  backoff?: Backoff;
  /** This kind's default priority (-1000..1000, higher runs first); an enqueue may override it. Default 0. */
  priority?: number;
  /** Most handlers of this kind running at once in one drainer (a slow kind cannot take every
   * slot). Default: no limit beyond the drainer's own concurrency. */
  concurrency?: number;
  /** On the Worker, run every job of this kind enqueued through its HTTP API at once, in the
   * same invocation (as `"runNow": true`), instead of at the next cron. */
  eager?: boolean;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_ATTEMPTS = JOB_DEFAULTS.maxAttempts;
export { KIND_PATTERN };

export function defineJob<Payload>(definition: JobDefinition<Payload>): JobDefinition<Payload> {
  if (!KIND_PATTERN.test(definition.kind)) {
    throw new Error(`job kind ${JSON.stringify(definition.kind)}: ${KIND_PATTERN_MESSAGE}`);
  }
  if (definition.priority !== undefined && !(Number.isInteger(definition.priority) && Math.abs(definition.priority) <= 1000)) {
    throw new Error(`job kind ${definition.kind}: priority must be an integer from -1000 to 1000`);
  }
  if (definition.concurrency !== undefined && !(Number.isInteger(definition.concurrency) && definition.concurrency >= 1)) {
    throw new Error(`job kind ${definition.kind}: concurrency must be a positive integer`);
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
  /** Default: the kind's priority, else 0. */
  priority?: number;
}

export class JobValidationError extends Error {
  override name = 'JobValidationError';
  code: 'unknown_kind' | 'invalid_payload';
  constructor(code: 'unknown_kind' | 'invalid_payload', message: string) {
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
  return {
    kind: definition.kind,
    // Store what the caller sent (validated), not the parse output, so the handler's own parse
    // at run time sees the same input.
    payload: request.payload,
    runAt: request.runAt,
    maxAttempts: request.maxAttempts ?? definition.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    dedupeKey: request.dedupeKey,
    visibilitySeconds: definition.visibilitySeconds,
    priority: request.priority ?? definition.priority,
  };
}

/** "payload.url: Invalid URL; payload.method: …" — names each field that was wrong. */
export function describeIssues(error: z.ZodError, prefix = 'payload'): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${[prefix, ...i.path.map(String)].join('.')}: ${i.message}`)
    .join('; ');
}
