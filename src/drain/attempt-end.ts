// How an attempt that did not return ended, as a value: the one place where what a handler threw
// (or what gave its attempt up) is sorted into what the drain does with its job. The drain and the
// batch runner switch on `as`; the trace names the same ends.
//
//   snoozed    settled by its handler's own statement (SettledByStatement): nothing to settle
//   released   abandoned at shutdown (HandlerAbandonedError): pending again, attempt refunded
//   cancelled  someone asked to cancel it (JobCancelledError): the completing statement ends it cancelled
//   lost       its lease was lost (LeaseLostError): the failing statement is refused by the lock token
//   failed     anything else: retried with backoff, or `dead` (a PermanentJobError, or its last attempt)
import { PermanentJobError } from '../jobs/registry.ts';
import type { ClaimedJob } from '../queries/index.ts';
import { JobCancelledError, LeaseLostError } from './lease-keeper.ts';
import { HandlerAbandonedError, SettledByStatement } from './run-handler.ts';

export type AttemptEnd =
  | { as: 'snoozed'; settled: SettledByStatement }
  | { as: 'released'; reason: string }
  | { as: 'cancelled'; error: JobCancelledError }
  | { as: 'lost'; error: LeaseLostError }
  | { as: 'failed'; error: unknown; dead: boolean };

/** What `error`, thrown by (or given up on) `job`'s attempt, means for the job. */
export function attemptEndOf(job: ClaimedJob, error: unknown): AttemptEnd {
  if (error instanceof SettledByStatement) return { as: 'snoozed', settled: error };
  if (error instanceof HandlerAbandonedError) return { as: 'released', reason: error.message };
  if (error instanceof JobCancelledError) return { as: 'cancelled', error };
  if (error instanceof LeaseLostError) return { as: 'lost', error };
  return { as: 'failed', error, dead: error instanceof PermanentJobError || job.attempts >= job.maxAttempts };
}

/** The end's name in the job's `process` span: `snoozed`, `released`, `cancelled`, `lost`, `dead`, `retry`. */
export const traceOutcome = (end: AttemptEnd): string => (end.as === 'failed' ? (end.dead ? 'dead' : 'retry') : end.as);

/** The error an end carries, for the span (none for a snooze or a release). */
export const endError = (end: AttemptEnd): unknown =>
  end.as === 'failed' || end.as === 'cancelled' || end.as === 'lost' ? end.error : undefined;
