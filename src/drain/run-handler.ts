// One job's handler, run with the kind's timeout clipped to the drain's deadline and an AbortSignal
// that fires at the timeout or when the job's lease is lost. A handler that ignores its signal is
// abandoned then (its promise is no longer awaited), never waited for forever.
import { DEFAULT_TIMEOUT_MS, type JobRegistry, PermanentJobError, describeIssues } from '../jobs/registry.ts';
import type { ClaimedJob } from '../queries/index.ts';
/** Gives the job up: aborts its handler's signal and stops waiting for the handler. */
export type GiveUp = (error: Error) => void;

/** The drainer stopped waiting for a handler at shutdown: its job goes back to pending at once. */
export class HandlerAbandonedError extends Error {
  override name = 'HandlerAbandonedError';
}

export async function runHandler(
  registry: JobRegistry,
  job: ClaimedJob,
  /** Epoch ms by which the handler must be done (the drain's budget). */
  deadline: number,
  /** Receives the function that gives the job up (the lease keeper calls it when the lease is lost). */
  onStart: (giveUp: GiveUp) => void,
): Promise<void> {
  const definition = registry.get(job.kind);
  if (!definition) throw new PermanentJobError(`no handler is registered for kind ${JSON.stringify(job.kind)}`);
  const parsed = definition.schema.safeParse(job.payload);
  if (!parsed.success) throw new PermanentJobError(`payload rejected by kind ${job.kind}: ${describeIssues(parsed.error)}`);

  const kindTimeout = definition.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const left = deadline - Date.now();
  const timeoutMs = Math.max(0, Math.min(kindTimeout, left));
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const givenUp = new Promise<never>((_, reject) => {
    const stop = (error: Error) => {
      controller.abort(error);
      reject(error);
    };
    onStart(stop);
    timer = setTimeout(() => {
      const error = new Error(
        left < kindTimeout ? `handler did not finish within the drain's remaining budget of ${timeoutMs} ms` : `handler timed out after ${timeoutMs} ms`,
      );
      error.name = 'TimeoutError';
      stop(error);
    }, timeoutMs);
  });
  try {
    await Promise.race([Promise.resolve().then(() => definition.handler(parsed.data, { job, signal: controller.signal })), givenUp]);
  } finally {
    clearTimeout(timer);
  }
}

/** A readable last_error for anything a handler can throw. */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const message = error.message || '(no message)';
    return error.name && error.name !== 'Error' ? `${error.name}: ${message}` : message;
  }
  if (typeof error === 'string') return error;
  if (error === undefined) return 'handler threw undefined';
  try {
    return `handler threw a non-Error value: ${JSON.stringify(error)}`;
  } catch {
    return `handler threw a non-Error value: ${String(error)}`;
  }
}
