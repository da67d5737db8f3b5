// Why an attempt failed, in the runtime's log: "job 12 (charge) attempt 1 of 3 failed: card
// declined; it runs again at …". Without it a newcomer's first failing handler showed only
// "jobs settled: 1 failed", and the reason was a `pgdrain job 12` away. Both runtimes say it through
// this one limiter: at most FAILURE_LINES per interval, then one line saying that more failed than
// the log shows (the settled counts have them all; the dashboard and `pgdrain jobs --status dead`
// list them), so a kind failing by the thousand a second does not flood the log.
import { safeErrorMessage } from '../db/url.ts';
import type { AttemptFailed } from '../drain/index.ts';

/** Failed attempts said per interval, at most. */
export const FAILURE_LINES = 10;
/** The interval (ms). */
export const FAILURE_INTERVAL_MS = 10_000;
/** A failure's message is cut to this many characters in the log (the job's lastError keeps 4,000). */
const ERROR_SHOWN_CHARS = 500;

/** A failed attempt as the log says it. */
export interface FailureLine {
  jobId: string;
  kind: string;
  attempt: number;
  maxAttempts: number;
  /** When it runs again (ISO 8601); null: it is dead. */
  retryAt: string | null;
  /** Its error, connection strings and passwords masked. */
  error: string;
}

export interface FailureSink {
  /** One failed attempt: its fields, and the sentence for a reader. */
  failed(line: FailureLine, message: string): void;
  /** More attempts failed in this interval than the log says: once per interval. */
  muted(message: string): void;
}

/** A function for DrainSessionOptions.onAttemptFailed that says each failure through `sink`, within
 * the limit. */
export function attemptFailureLog(
  sink: FailureSink,
  { lines = FAILURE_LINES, intervalMs = FAILURE_INTERVAL_MS } = {},
): (failed: AttemptFailed) => void {
  let windowStart = Number.NEGATIVE_INFINITY;
  let said = 0;
  return (failed) => {
    const now = Date.now();
    if (now - windowStart >= intervalMs) {
      windowStart = now;
      said = 0;
    }
    said++;
    if (said > lines) {
      if (said === lines + 1)
        sink.muted(
          `more attempts failed than the log shows (${lines} every ${intervalMs / 1000} s): the "jobs settled" ` +
            'counts have them all; the dashboard and `pgdrain jobs --status dead` list them',
        );
      return;
    }
    const line = failureLine(failed);
    sink.failed(line, failureMessage(line));
  };
}

function failureLine(failed: AttemptFailed): FailureLine {
  const error = safeErrorMessage(failed.error);
  return {
    jobId: failed.id,
    kind: failed.kind,
    attempt: failed.attempt,
    maxAttempts: failed.maxAttempts,
    retryAt: failed.runAt?.toISOString() ?? null,
    error: error.length > ERROR_SHOWN_CHARS ? `${error.slice(0, ERROR_SHOWN_CHARS)}…` : error,
  };
}

/** "job 12 (charge) attempt 1 of 3 failed: card declined; it runs again at 2026-12-08T10:00:01.000Z". */
function failureMessage(line: FailureLine): string {
  const which = `job ${line.jobId} (${line.kind}) attempt ${line.attempt} of ${line.maxAttempts}`;
  return line.retryAt === null
    ? `${which} failed: ${line.error}; it is dead (no attempt left, or a permanent error): ` +
        `pgdrain retry ${line.jobId} runs it again`
    : `${which} failed: ${line.error}; it runs again at ${line.retryAt}`;
}
