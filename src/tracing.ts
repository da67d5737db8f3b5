// Tracing with OpenTelemetry, through @opentelemetry/api only — an optional peer dependency. Nothing
// is imported, and nothing costs more than a null check, unless the app has registered something
// with the API (which keeps its globals under a well-known symbol): then the API is loaded once.
// A Worker cannot import a package by name at run time, so there the app passes its API in
// (createWorker({ openTelemetry }) or useOpenTelemetry()).
//
// The spans follow the OpenTelemetry messaging conventions, with messaging.system = "pgdrain" and
// the job's kind as the destination:
//
//   create <kind>    PRODUCER  an enqueue made while a span is active (enqueue(), enqueueMany(),
//                              POST /jobs and /jobs/batch, whose `traceparent` header counts);
//                              its W3C trace context is stored with the job (jobs.traceparent;
//                              pgdrain.enqueue(…, traceparent) in SQL)
//   receive <kinds>  CLIENT    a claim that brought jobs back (named after the kinds it received)
//   process <kind>   CONSUMER  a handler's run: child of its claim's span, linked to the enqueue's
//                              span; the handler's own spans nest under it; its outcome, error and
//                              whether it will be retried are recorded on it
//   step <name>      INTERNAL  a workflow step that ran in this attempt (src/workflows/), under the
//                              run's process span; the step's own spans nest under it; its outcome
//                              (completed, failed, parked) is recorded on it. Stored steps that
//                              returned without running have none.
import type * as OpenTelemetry from '@opentelemetry/api';
import { openTelemetry as registeredApi } from './open-telemetry.ts';

/** The whole API, as the drain and this module use it (its types stay out of the published ones:
 * the app hands pgdrain the API typed as open-telemetry.ts says). */
export type OpenTelemetryApi = typeof OpenTelemetry;
const TRACER_NAME = 'pgdrain';

/** The OpenTelemetry API when the app uses it, else null (nothing loaded). */
export function openTelemetry(): Promise<OpenTelemetryApi | null> | OpenTelemetryApi | null {
  return registeredApi() as Promise<OpenTelemetryApi | null> | OpenTelemetryApi | null;
}

/** A span context as a W3C `traceparent` header value. */
export function traceparentOf(context: OpenTelemetry.SpanContext): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A `traceparent` value as a remote span context; null when it is not one. */
export function spanContextOf(traceparent: string | null | undefined): OpenTelemetry.SpanContext | null {
  const match = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!match || /^0+$/.test(match[1]!) || /^0+$/.test(match[2]!)) return null;
  return { traceId: match[1]!, spanId: match[2]!, traceFlags: Number.parseInt(match[3]!, 16), isRemote: true };
}

export function isTraceparent(value: string): boolean {
  return spanContextOf(value) !== null;
}

const tracerOf = (api: OpenTelemetryApi) => api.trace.getTracer(TRACER_NAME);

/** Messaging attributes every pgdrain span carries. */
function messaging(operation: 'create' | 'receive' | 'process', kinds: readonly string[]): OpenTelemetry.Attributes {
  return {
    'messaging.system': 'pgdrain',
    'messaging.operation.type': operation,
    'messaging.operation.name': operation,
    ...(kinds.length === 1 ? { 'messaging.destination.name': kinds[0]! } : {}),
  };
}

/**
 * Runs an enqueue of `jobs` inside a `create` span when a span is active (or `parent`, an incoming
 * `traceparent`, is given), the jobs carrying its trace context; else just runs it.
 */
export async function traceEnqueue<J extends { kind: string; traceparent?: string }, R>(
  jobs: readonly J[],
  enqueue: (jobs: readonly J[]) => Promise<R>,
  options: { parent?: string | null; ids?: (result: R) => readonly string[] } = {},
): Promise<R> {
  const api = await openTelemetry();
  if (!api || jobs.length === 0) return enqueue(jobs);
  const remote = spanContextOf(options.parent);
  const parent = remote ? api.trace.setSpanContext(api.context.active(), remote) : api.context.active();
  if (!api.trace.getSpanContext(parent)) return enqueue(jobs);
  const kinds = [...new Set(jobs.map((j) => j.kind))];
  const span = tracerOf(api).startSpan(
    `create ${kinds.join(',')}`,
    {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        ...messaging('create', kinds),
        ...(jobs.length > 1 ? { 'messaging.batch.message_count': jobs.length } : {}),
      },
    },
    parent,
  );
  const traceparent = traceparentOf(span.spanContext());
  try {
    const result = await api.context.with(api.trace.setSpan(parent, span), () =>
      enqueue(jobs.map((j) => (j.traceparent ? j : { ...j, traceparent }))),
    );
    const ids = options.ids?.(result) ?? [];
    if (ids.length === 1) span.setAttribute('messaging.message.id', ids[0]!);
    return result;
  } catch (error) {
    recordError(api, span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** A claim that brought jobs (of `kinds`) back, as a `receive` span from when it was sent; returns
 * the context its jobs' `process` spans are children of. */
export function traceClaim(
  api: OpenTelemetryApi,
  kinds: readonly string[],
  count: number,
  sentAt: number,
): OpenTelemetry.Context {
  const span = tracerOf(api).startSpan(
    `receive ${kinds.length <= 3 ? kinds.join(',') : 'jobs'}`,
    {
      kind: api.SpanKind.CLIENT,
      startTime: sentAt,
      attributes: { ...messaging('receive', kinds), 'messaging.batch.message_count': count },
    },
    api.ROOT_CONTEXT,
  );
  span.end();
  return api.trace.setSpan(api.ROOT_CONTEXT, span);
}

/** The job a `process` span is about. */
export interface TracedJob {
  id: string;
  kind: string;
  attempts: number;
  maxAttempts: number;
  traceparent: string | null;
}

/** A handler's run: a `process` span under `claimContext`, linked to the enqueue's span. */
export class ProcessSpan {
  readonly #api: OpenTelemetryApi;
  readonly #span: OpenTelemetry.Span;
  readonly context: OpenTelemetry.Context;

  constructor(api: OpenTelemetryApi, job: TracedJob, claimContext: OpenTelemetry.Context) {
    this.#api = api;
    const created = spanContextOf(job.traceparent);
    this.#span = tracerOf(api).startSpan(
      `process ${job.kind}`,
      {
        kind: api.SpanKind.CONSUMER,
        attributes: {
          ...messaging('process', [job.kind]),
          'messaging.message.id': job.id,
          'pgdrain.job.attempt': job.attempts,
          'pgdrain.job.max_attempts': job.maxAttempts,
        },
        links: created ? [{ context: created, attributes: { 'messaging.operation.type': 'create' } }] : [],
      },
      claimContext,
    );
    this.context = api.trace.setSpan(claimContext, this.#span);
  }

  /** Runs `fn` with this span active: the handler's own spans nest under it. */
  run<T>(fn: () => T): T {
    return this.#api.context.with(this.context, fn);
  }

  /** How the attempt ended: `completed`, `retry`, `dead`, `cancelled`, `released`, `lost`, `snoozed`. */
  end(outcome: string, error?: unknown): void {
    this.#span.setAttribute('pgdrain.job.outcome', outcome);
    if (error !== undefined) recordError(this.#api, this.#span, error);
    this.#span.end();
  }
}

/** How a step's run ended, for its span: `parked` for a sleep or wait that ended the attempt. */
export type StepOutcome = 'completed' | 'failed' | 'parked';

/**
 * A workflow step's run as a `step <name>` span under the active one (the run's process span), with
 * `fn` run inside it; `outcomeOf` names how a thrown error ended it. Costs a null check when
 * nothing is traced.
 */
export async function traceStep<T>(
  workflow: { kind: string; jobId: string },
  name: string,
  fn: () => Promise<T>,
  outcomeOf: (error: unknown) => StepOutcome,
): Promise<T> {
  const api = await openTelemetry();
  if (!api) return fn();
  return tracerOf(api).startActiveSpan(
    `step ${name}`,
    {
      attributes: {
        'pgdrain.workflow.kind': workflow.kind,
        'messaging.message.id': workflow.jobId,
        'pgdrain.step.name': name,
      },
    },
    async (span) => {
      try {
        const value = await fn();
        span.setAttribute('pgdrain.step.outcome', 'completed');
        return value;
      } catch (error) {
        const outcome = outcomeOf(error);
        span.setAttribute('pgdrain.step.outcome', outcome);
        if (outcome === 'failed') recordError(api, span, error);
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

function recordError(api: OpenTelemetryApi, span: OpenTelemetry.Span, error: unknown): void {
  const exception = error instanceof Error ? error : new Error(String(error));
  span.recordException(exception);
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: exception.message });
}
