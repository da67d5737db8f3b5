// One attempt, one outcome. Running a job — its handler, its kind's own runner (KindRunner), one
// item of a batch call — resolves to an Outcome value; this file is the one place where what an
// attempt threw (or what gave it up) is sorted into one, and the drain turns each into one
// settlement (settler.ts):
//
//   completed  the handler returned: complete it (deleted, or kept with its result); `inTransaction`:
//              a transactional handler completed it in its own transaction already
//   failed     it threw or timed out: retried with backoff, or dead (`dead`: its last attempt, or a
//              PermanentJobError; the failing statement applies the same rule)
//   snoozed    its kind's runner ended the attempt with a statement of its own that committed:
//              pending again at `dueAt`, or waiting for something; nothing to settle
//   released   abandoned at shutdown (HandlerAbandonedError): pending again, attempt refunded
//   cancelled  someone asked to cancel it (JobCancelledError): the completing statement ends it cancelled
//   lost       its lease was lost (LeaseLostError): another drainer may hold it; the settlement, if
//              any, is refused by the lock token
import { PermanentJobError, RetryLaterError } from '../jobs/definition.ts';
import type { ClaimedJob } from '../queries/index.ts';
import { errorText } from '../json.ts';
import { PgdrainError } from '../errors.ts';
import { JobCancelledError, LeaseLostError } from './lease-keeper.ts';

/** What a kept job stores with its completion. */
export interface Kept {
  /** Keep the row this long (its kind's keepCompletedSeconds). */
  keepSeconds: number;
  /** What the handler returned, as JSON text. */
  resultJson: string | null;
  /** Its last progress report not yet saved. */
  progressJson?: string;
}

export type Outcome =
  | { as: 'completed'; kept?: Kept; inTransaction?: { unblockedKinds: readonly string[] } }
  | {
      as: 'failed';
      /** Its error as last_error keeps it. */
      error: string;
      permanent: boolean;
      retryAfterSeconds?: number;
      dead: boolean;
      /** What was thrown (for the trace). */
      thrown: unknown;
    }
  | { as: 'snoozed'; dueAt: number | null; readyKinds: readonly string[] }
  | { as: 'released'; reason: string }
  | { as: 'cancelled'; thrown: JobCancelledError }
  | { as: 'lost'; thrown: LeaseLostError };

/** The drainer stopped waiting for a handler at shutdown: its job goes back to pending at once. */
export class HandlerAbandonedError extends PgdrainError {
  override name = 'HandlerAbandonedError';
  readonly code = 'handler_abandoned';
}

/** The outcome of `job`'s attempt that threw `thrown` (or was given up with it). */
export function outcomeOf(job: ClaimedJob, thrown: unknown): Outcome {
  if (thrown instanceof HandlerAbandonedError) return { as: 'released', reason: thrown.message };
  if (thrown instanceof JobCancelledError) return { as: 'cancelled', thrown };
  if (thrown instanceof LeaseLostError) return { as: 'lost', thrown };
  const permanent = thrown instanceof PermanentJobError;
  return {
    as: 'failed',
    error: errorText(thrown),
    permanent,
    retryAfterSeconds: thrown instanceof RetryLaterError ? thrown.retryAfterSeconds : undefined,
    dead: permanent || job.attempts >= job.maxAttempts,
    thrown,
  };
}

/** The outcome's name in the job's `process` span: `completed`, `snoozed`, `released`, `cancelled`,
 * `lost`, `dead`, `retry`. */
export const traceName = (outcome: Outcome): string =>
  outcome.as === 'failed' ? (outcome.dead ? 'dead' : 'retry') : outcome.as;

/** The error an outcome carries, for the span (none for a completion, a snooze or a release). */
export const thrownBy = (outcome: Outcome): unknown =>
  outcome.as === 'failed' || outcome.as === 'cancelled' || outcome.as === 'lost' ? outcome.thrown : undefined;
