// What an enqueue takes and returns, for every statement of this folder.
import type { JobStatus } from '../../db/schema.ts';
import { PgdrainError } from '../../errors.ts';

export type DedupeMode = 'keep' | 'replace';

/** A job as the statements store it: its kind's settings already filled in (the enqueue pipeline,
 * src/jobs/enqueue.ts, does that); what is unset gets the column's default. */
export interface NewJob {
  kind: string;
  payload: unknown;
  /** When the job becomes claimable; default now. */
  runAt?: Date;
  maxAttempts?: number;
  /** While a job with this key exists, enqueueing the key again returns that job instead. */
  dedupeKey?: string;
  /** With a dedupeKey: 'keep' (default) returns the existing job as it is; 'replace' (debounce)
   * gives a pending job of the same kind this payload and run_at, and when the key's job is
   * running or dead, leaves it be (it gives up the key) and enqueues this one. */
  dedupeMode?: DedupeMode;
  /** Its own visibility timeout (its kind's); unset: the claiming drainer's. */
  visibilityTimeoutSeconds?: number;
  /** -1000..1000, higher runs first among ready jobs; default 0. */
  priority?: number;
  /** Jobs of one kind with the same key share the kind's groupConcurrency. */
  groupKey?: string;
  /** The handler's timeout for this job; default the kind's. */
  timeoutMs?: number;
  /** Keep it this long once completed or cancelled (its kind's keepCompletedSeconds). */
  keepSeconds?: number;
  /** Ids of jobs this one waits for: it is claimed once every one of them has completed, and is
   * dead at once if one of them ends dead or cancelled. Every id must exist. */
  after?: readonly string[];
  /** The W3C trace context of the span that enqueued it (`00-<trace>-<span>-<flags>`): the handler's
   * span links to it. Set by the enqueue pipeline when a tracer is registered (src/tracing.ts). */
  traceparent?: string;
  /** A workflow run's version, when it is not the first (defineWorkflow `version`): only drainers
   * that have it claim the run. */
  version?: number;
  /** Enqueued by the kind's name alone (the enqueuer does not have its definition): what it leaves
   * unset among max_attempts, priority, visibility, keep and version comes from the kind's row in
   * pgdrain.kinds, as a typed enqueue would write it; a kind no drainer wrote gets the defaults. */
  fromKind?: boolean;
}

export interface EnqueuedJob {
  id: string;
  status: JobStatus;
  runAt: Date;
  /** True when the dedupe key matched an existing job and nothing was inserted. */
  deduplicated: boolean;
  /** dedupeMode 'replace': a pending job with the key took this payload and run_at. */
  replaced?: boolean;
}

/** `after` named jobs that do not exist (completed jobs are deleted unless their kind keeps them). */
export class UnknownDependencyError extends PgdrainError {
  override name = 'UnknownDependencyError';
  readonly code = 'unknown_dependency';
  readonly ids: readonly string[];
  constructor(ids: readonly string[]) {
    super(
      `after names jobs that do not exist: ${ids.join(', ')} (completed jobs are deleted unless their kind keeps ` +
        `them: enqueue a job with the jobs it waits for, in one transaction)`,
    );
    this.ids = ids;
  }
}

/** What an INSERT … RETURNING of this folder reads back. */
export interface ReturnedRow {
  id: string;
  status: EnqueuedJob['status'];
  run_at_ms: number;
  inserted: boolean;
}

export const toEnqueued = (r: ReturnedRow): EnqueuedJob => ({
  id: String(r.id),
  status: r.status,
  runAt: new Date(Number(r.run_at_ms)),
  deduplicated: !r.inserted,
});
