// A job as the API shows it (and `pgdrain job --json`), typed by the contract, so the documented
// shape and this one cannot drift.
import type { Job } from '../queries/index.ts';
import type { Job as JobBody } from './contract.ts';

/** A job as the API shows it; typed by the contract, so the documented shape and this one cannot drift. */
export function jobJson(job: Job): JobBody {
  return {
    id: job.id,
    kind: job.kind,
    payload: job.payload as JobBody['payload'], // read from jsonb: JSON by construction
    status: job.status,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    priority: job.priority,
    groupKey: job.groupKey,
    runAt: job.runAt.toISOString(),
    lockedAt: job.lockedAt?.toISOString() ?? null,
    lockedBy: job.lockedBy,
    lastError: job.lastError,
    createdAt: job.createdAt.toISOString(),
    finishedAt: job.finishedAt?.toISOString() ?? null,
    result: (job.result ?? null) as JobBody['result'],
    progress: (job.progress ?? null) as JobBody['progress'],
    cancelRequested: job.cancelRequestedAt !== null,
    waitingFor: job.waitingFor,
    timeoutMs: job.timeoutMs,
  };
}
