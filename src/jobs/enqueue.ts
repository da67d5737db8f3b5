// The enqueue pipeline: every way a job comes in — enqueue()/enqueueMany() in your code, the HTTP
// API, recurring schedules, the CLI — goes through prepareEnqueue(), in two steps:
//
//   prepare   the options checked against their one schema (job-options.ts), the payload against
//             its kind's schema where the kind is known, the kind's settings filled in (its
//             maxAttempts, priority, visibility, what it keeps); throws JobValidationError before
//             anything is sent
//   send      one `create` span when a trace is active (its context stored with each job), then
//             the statements of src/queries/enqueue/ in the given database or transaction
//
// A kind the registry does not know is refused (the API), or stored as given and validated when it
// runs (enqueue() by name, the CLI), like pgdrain.enqueue() in SQL.
import * as queries from '../queries/index.ts';
import type { Db, EnqueuedJob, NewJob } from '../queries/index.ts';
import { JOB_DEFAULTS } from '../db/constants.ts';
import { traceEnqueue } from '../tracing.ts';
import { type EnqueueOptions, optionsProblem } from './job-options.ts';
import {
  type JobDefinition,
  JobValidationError,
  type KindLookup,
  describeIssues,
  maxTimeoutOf,
  versionOf,
} from './definition.ts';

export type { EnqueueOptions } from './job-options.ts';

/** What a caller asks to enqueue, before validation. */
export interface EnqueueRequest extends EnqueueOptions {
  kind: string;
  payload: unknown;
}

/** What a way in does with a kind its registry does not have. */
export type UnknownKinds = 'refuse' | 'store';

export interface EnqueueSource {
  /** The kinds to validate against (a JobRegistry). */
  registry?: KindLookup;
  /** Default 'store'. */
  unknownKinds?: UnknownKinds;
  /** The caller's W3C trace context (an HTTP request's `traceparent` header), when it has one. */
  traceParent?: string | null;
}

/** Jobs checked and ready to send. */
export interface PreparedEnqueue {
  readonly jobs: readonly NewJob[];
  /** Sends them in `db` (a database or your transaction): one statement for one job, one per
   * chunk for many (all or nothing). Jobs that go one by one stop at `signal` (the client that
   * asked went away): the transaction rolls back, nothing is stored. */
  send(db: Db, signal?: AbortSignal): Promise<EnqueuedJob[]>;
}

/** Checks and prepares `requests` now (throws JobValidationError naming what was wrong, with the
 * index of the request it refused). */
export function prepareEnqueue(requests: readonly EnqueueRequest[], source: EnqueueSource = {}): PreparedEnqueue {
  const jobs = requests.map((r, i) => {
    try {
      return prepareRequest(r, source.registry, source.unknownKinds ?? 'store');
    } catch (error) {
      if (error instanceof JobValidationError) error.index = i;
      throw error;
    }
  });
  return preparedJobs(jobs, source.traceParent);
}

/** `jobs` (already prepared) as ready to send, traced. */
export function preparedJobs(jobs: readonly NewJob[], traceParent?: string | null): PreparedEnqueue {
  return {
    jobs,
    send: (db, signal) =>
      traceEnqueue(
        jobs,
        (all) =>
          all.length === 1 ? queries.enqueue(db, all[0]!).then((one) => [one]) : queries.enqueueMany(db, all, signal),
        {
          parent: traceParent,
          ids: (r) => r.map((e) => e.id),
        },
      ),
  };
}

/** One request: its kind's definition from `registry`, or as given (unknownKinds 'store'). */
export function prepareRequest(
  request: EnqueueRequest,
  registry: KindLookup | undefined,
  unknownKinds: UnknownKinds,
): NewJob {
  const definition = registry?.get(request.kind);
  if (definition) return prepareJob(definition, request);
  if (unknownKinds === 'refuse') {
    const kinds = registry?.kinds() ?? [];
    throw new JobValidationError(
      'unknown_kind',
      `unknown job kind ${JSON.stringify(request.kind)}; registered kinds: ${kinds.join(', ') || '(none)'}`,
    );
  }
  const { kind, payload, ...options } = request;
  const problem = optionsProblem(options);
  if (problem) throw new JobValidationError('invalid_option', problem);
  // What the caller does not set comes from the kind's stored definition, where a drainer wrote one.
  return { kind, payload, ...options, fromKind: true };
}

/** Checks the payload against the kind's schema and the options against theirs, and fills in the
 * kind's settings; throws JobValidationError. */
export function prepareJob(definition: JobDefinition<any>, request: Omit<EnqueueRequest, 'kind'>): NewJob {
  const parsed = definition.schema.safeParse(request.payload);
  if (!parsed.success) {
    throw new JobValidationError(
      'invalid_payload',
      `payload rejected by kind ${definition.kind}: ${describeIssues(parsed.error)}`,
    );
  }
  const { payload, ...options } = request;
  const problem = optionsProblem(options);
  if (problem) throw new JobValidationError('invalid_option', problem);
  if (options.timeoutMs !== undefined && options.timeoutMs > maxTimeoutOf(definition)) {
    throw new JobValidationError(
      'invalid_request',
      `timeoutMs: kind ${definition.kind} allows a job at most ${maxTimeoutOf(definition)} ms (its maxTimeoutMs), ` +
        `not ${options.timeoutMs}`,
    );
  }
  const columns = kindColumns(definition);
  return {
    ...options,
    kind: definition.kind,
    // Store what the caller sent (validated), not the parse output, so the handler's own parse
    // at run time sees the same input.
    payload,
    ...columns,
    maxAttempts: options.maxAttempts ?? columns.maxAttempts,
    priority: options.priority ?? columns.priority,
  };
}

/** The columns a kind's definition writes into each of its jobs (the caller's options aside): a
 * typed enqueue writes them, and pgdrain.kinds keeps them for an enqueue by the kind's name alone. */
export function kindColumns(
  definition: JobDefinition<any>,
): Required<Pick<NewJob, 'maxAttempts'>> &
  Pick<NewJob, 'priority' | 'visibilityTimeoutSeconds' | 'keepSeconds' | 'version'> {
  return {
    maxAttempts: definition.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    priority: definition.priority,
    visibilityTimeoutSeconds: definition.visibilityTimeoutSeconds,
    keepSeconds: definition.keepCompletedSeconds || undefined,
    // The first version is the kind's name alone (claim.sql): no version is written for it.
    version: versionOf(definition) > 1 ? versionOf(definition) : undefined,
  };
}

/**
 * Enqueues one job in `db` (your Drizzle database, or the transaction you are in: the job then
 * commits or rolls back with your rows).
 *
 *   await enqueue(tx, sendReceipt, { orderId });          // typed and validated now
 *   await enqueue(tx, { kind: 'send_receipt', payload }); // by name, validated when it runs
 *
 * Throws JobValidationError (code 'invalid_payload', 'invalid_option') when the kind's schema or
 * the options' refuse what is given. With OpenTelemetry in use and a span active, the enqueue is a
 * `create` span and the job carries its trace context (src/tracing.ts).
 */
export function enqueue<Payload>(
  db: Db,
  job: JobDefinition<Payload>,
  payload: Payload,
  options?: EnqueueOptions,
): Promise<EnqueuedJob>;
export function enqueue(db: Db, job: EnqueueRequest | NewJob): Promise<EnqueuedJob>;
export function enqueue<Payload>(
  db: Db,
  job: JobDefinition<Payload> | NewJob,
  payload?: Payload,
  options: EnqueueOptions = {},
): Promise<EnqueuedJob> {
  // Validation throws (at the call, not in the promise) before anything is sent to the database.
  const prepared = isDefinition(job)
    ? preparedJobs([prepareJob(job, { ...options, payload })])
    : prepareEnqueue([job as EnqueueRequest]);
  return prepared.send(db).then(([one]) => one!);
}

/**
 * Enqueues many jobs in one statement per 10,000, in `db` (a database or your transaction), all or
 * nothing, and returns them in input order.
 *
 *   await enqueueMany(tx, sendReceipt, orders.map((o) => ({ orderId: o.id })));
 *   await enqueueMany(tx, [{ kind: 'noop', payload: {} }, …]);
 */
export function enqueueMany<Payload>(
  db: Db,
  job: JobDefinition<Payload>,
  payloads: readonly Payload[],
  options?: Omit<EnqueueOptions, 'dedupeKey'>,
): Promise<EnqueuedJob[]>;
export function enqueueMany(db: Db, jobs: readonly (EnqueueRequest | NewJob)[]): Promise<EnqueuedJob[]>;
export function enqueueMany<Payload>(
  db: Db,
  job: JobDefinition<Payload> | readonly (EnqueueRequest | NewJob)[],
  payloads: readonly Payload[] = [],
  options: Omit<EnqueueOptions, 'dedupeKey'> = {},
): Promise<EnqueuedJob[]> {
  if (!isDefinition(job)) return prepareEnqueue(job as readonly EnqueueRequest[]).send(db);
  if (payloads.length === 0) return Promise.resolve([]);
  // The options are the same for every job: checked once, with the first payload.
  const first = prepareJob(job, { ...options, payload: payloads[0] });
  const rest = payloads.slice(1).map((payload) => {
    const parsed = job.schema.safeParse(payload);
    if (!parsed.success)
      throw new JobValidationError(
        'invalid_payload',
        `payload rejected by kind ${job.kind}: ${describeIssues(parsed.error)}`,
      );
    return { ...first, payload };
  });
  return preparedJobs([first, ...rest]).send(db);
}

function isDefinition<Payload>(
  job: JobDefinition<Payload> | NewJob | readonly unknown[],
): job is JobDefinition<Payload> {
  return typeof (job as JobDefinition<Payload>).handler === 'function' && 'schema' in job;
}
