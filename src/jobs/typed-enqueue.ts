// enqueue / enqueueMany as the package exports them: either by job definition — the payload typed
// by the kind's zod schema and checked now, the kind's limits filled in — or by kind name, stored
// as given (like pgdrain.enqueue() in SQL; a drainer sends a payload its kind rejects to dead).
// Both join whatever Drizzle database or transaction they are given.
import * as queries from '../queries/index.ts';
import type { DedupeMode, Db, EnqueuedJob, NewJob } from '../queries/index.ts';
import { traceEnqueue } from '../tracing.ts';
import { type JobDefinition, prepareJob } from './registry.ts';

/** When and how a job of a defined kind runs; the kind's own settings fill the rest. */
export interface EnqueueOptions {
  /** When the job becomes claimable; default now. */
  runAt?: Date;
  /** Default: the kind's maxAttempts, else 3. */
  maxAttempts?: number;
  /** While a job with this key exists, enqueueing the key again returns that job instead. */
  dedupeKey?: string;
  /** -1000..1000, higher runs first; default: the kind's priority, else 0. */
  priority?: number;
  /** With a dedupeKey: 'keep' (default) returns the existing job; 'replace' gives a pending one this
   * payload and run_at, or, when it runs, enqueues this one after giving up its key. */
  dedupeMode?: DedupeMode;
  /** Jobs of the kind with the same key share its groupConcurrency (1-200 characters). */
  groupKey?: string;
  /** The handler's timeout for this job (100 ms to a day); default the kind's. */
  timeoutMs?: number;
  /** Ids of jobs this one waits for: it runs once all of them completed, and is dead at once if
   * one ends dead or cancelled. They must exist (enqueue them in the same transaction). */
  after?: readonly string[];
}

/**
 * Enqueues one job in `db` (your Drizzle database, or the transaction you are in: the job then
 * commits or rolls back with your rows).
 *
 *   await enqueue(tx, sendReceipt, { orderId });          // typed and validated now
 *   await enqueue(tx, { kind: 'send_receipt', payload }); // by name, validated when it runs
 *
 * Throws JobValidationError (code 'invalid_payload') when a defined kind's schema rejects the payload.
 * With OpenTelemetry in use and a span active, the enqueue is a `create` span and the job carries
 * its trace context (src/tracing.ts).
 */
export function enqueue<Payload>(db: Db, job: JobDefinition<Payload>, payload: Payload, options?: EnqueueOptions): Promise<EnqueuedJob>;
export function enqueue(db: Db, job: NewJob): Promise<EnqueuedJob>;
export function enqueue<Payload>(db: Db, job: JobDefinition<Payload> | NewJob, payload?: Payload, options: EnqueueOptions = {}): Promise<EnqueuedJob> {
  // Validation throws before anything is sent to the database.
  const prepared = isDefinition(job) ? prepareJob(job, { ...options, payload }) : job;
  return traceEnqueue([prepared], ([one]) => queries.enqueue(db, one!), { ids: (r) => [r.id] });
}

/**
 * Enqueues many jobs in one statement per 50,000, in `db` (a database or your transaction), and
 * returns them in input order.
 *
 *   await enqueueMany(tx, sendReceipt, orders.map((o) => ({ orderId: o.id })));
 *   await enqueueMany(tx, [{ kind: 'noop', payload: {} }, …]);
 */
export function enqueueMany<Payload>(db: Db, job: JobDefinition<Payload>, payloads: readonly Payload[], options?: Omit<EnqueueOptions, 'dedupeKey'>): Promise<EnqueuedJob[]>;
export function enqueueMany(db: Db, jobs: readonly NewJob[]): Promise<EnqueuedJob[]>;
export function enqueueMany<Payload>(
  db: Db,
  job: JobDefinition<Payload> | readonly NewJob[],
  payloads: readonly Payload[] = [],
  options: Omit<EnqueueOptions, 'dedupeKey'> = {},
): Promise<EnqueuedJob[]> {
  const prepared = isDefinition(job) ? payloads.map((payload) => prepareJob(job, { ...options, payload })) : job;
  return traceEnqueue(prepared, (all) => queries.enqueueMany(db, all), { ids: (r) => r.map((e) => e.id) });
}

function isDefinition<Payload>(job: JobDefinition<Payload> | NewJob | readonly NewJob[]): job is JobDefinition<Payload> {
  return typeof (job as JobDefinition<Payload>).handler === 'function' && 'schema' in job;
}
