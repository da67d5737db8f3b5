// Batch kinds: one handler call gets up to `size` ready jobs of the kind and answers one outcome per
// job, in order — a result, or an Error that fails that job alone (retried by the kind's rule).
// Enqueueing is unchanged: the items are ordinary jobs. The drain runs a batch kind through its
// batch runner (src/drain/batch-runner.ts); everything else about the kind is a job kind's.
//
//   export const sendEmails = defineBatchJob({
//     kind: 'send-email', schema, size: 100, waitMs: 200,
//     handler: async (items, ctx) => items.map((item) => (sent(item) ? { messageId } : new Error('bounced'))),
//   });
import type { ClaimedJob } from '../queries/index.ts';
import { type JobContext, type JobDefinition, defineJob } from './definition.ts';

/** A batch's size is 1 to this many jobs. */
export const MAX_BATCH_SIZE = 1000;
/** A batch waits at most this long for more jobs. */
export const MAX_BATCH_WAIT_MS = 60_000;

export interface BatchItem<Payload> {
  payload: Payload;
  job: ClaimedJob;
  /** This job's own: aborted when it alone is given up — its lease lost (LeaseLostError: it may run
   * elsewhere, what the call answers for it is dropped) or someone cancelled it (JobCancelledError)
   * — and with the call's signal. Skip the work of an item whose signal aborted. */
  signal: AbortSignal;
}

export interface BatchContext {
  /** Aborted when the call's time is up (the kind's timeoutMs, or the drain's budget), when every
   * item's lease was lost or cancelled, or when a stopping drainer gives the call up. */
  signal: AbortSignal;
}

export type BatchHandler<Payload> = (items: BatchItem<Payload>[], ctx: BatchContext) => unknown[] | Promise<unknown[]>;

export interface BatchJobDefinition<Payload> extends Omit<JobDefinition<Payload>, 'handler' | 'transactional'> {
  /** Most jobs per call, 1..1000. */
  size: number;
  /** When fewer than `size` are ready, wait this long (0..60000 ms) for a fuller batch. Default 0. */
  waitMs?: number;
  /** One outcome per item, in order: a result (kept as the job's result where the kind keeps
   * results) or an Error (that job fails alone). Throwing fails every item; an answer of another
   * length fails every item, saying so. */
  handler: BatchHandler<Payload>;
}

export type BatchJob<Payload> = JobDefinition<Payload> & {
  readonly batch: { size: number; waitMs: number; handler: BatchHandler<Payload> };
};

export function defineBatchJob<Payload>(definition: BatchJobDefinition<Payload>): BatchJob<Payload> {
  const { size, waitMs = 0, handler, ...rest } = definition;
  if (!(Number.isInteger(size) && size >= 1 && size <= MAX_BATCH_SIZE)) {
    throw new Error(
      `job kind ${definition.kind}: size must be a whole number from 1 to ${MAX_BATCH_SIZE}, ` +
        `not ${JSON.stringify(size)}`,
    );
  }
  if (!(Number.isInteger(waitMs) && waitMs >= 0 && waitMs <= MAX_BATCH_WAIT_MS)) {
    throw new Error(
      `job kind ${definition.kind}: waitMs must be a whole number of milliseconds from 0 to ${MAX_BATCH_WAIT_MS}, ` +
        `not ${JSON.stringify(waitMs)}`,
    );
  }
  if (typeof handler !== 'function') throw new Error(`job kind ${definition.kind}: handler must be a function`);
  // Run on its own (a drainer that does not batch, a test): a batch of one.
  const single = async (payload: Payload, ctx: JobContext) => {
    const [outcome] = await handler([{ payload, job: ctx.job, signal: ctx.signal }], { signal: ctx.signal });
    if (outcome instanceof Error) throw outcome;
    return outcome;
  };
  return Object.assign(defineJob<Payload>({ ...rest, handler: single }), { batch: { size, waitMs, handler } });
}

/** The batch settings of a kind that is one. */
export const batchOf = (definition: JobDefinition<any> | undefined): BatchJob<unknown>['batch'] | undefined =>
  (definition as Partial<BatchJob<unknown>> | undefined)?.batch;
