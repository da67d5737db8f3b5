// A job as the API shows it (and `pgdrain job --json`), typed by the contract, so the documented
// shape and this one cannot drift. What a kind hides of its payload (redactPayload: the webhook
// kind's header values) is hidden from every reader here; lists show a payload's size and the
// start of it, never the whole (GET /jobs/:id has it).
import type { JobRegistry } from '../jobs/registry.ts';
import { type Job, type JobSummary, type StoredStep, SUMMARY_PAYLOAD_BYTES } from '../queries/index.ts';
import type { AttemptLogEntry, Job as JobBody, JobSummary as JobSummaryBody, WorkflowStep } from './contract.ts';

/** A list's preview of a payload is at most this many characters. */
export const PAYLOAD_PREVIEW_CHARS = 120;

/** A job as the API shows it. */
export function jobJson(job: Job, registry?: JobRegistry): JobBody {
  return {
    ...commonJson(job),
    payload: shownPayload(job.kind, job.payload, registry),
    attemptLog: attemptLogJson(job.attemptLog),
  };
}

/** The attempt log as stored (jsonb_build_object's timestamps) in the API's shape. */
function attemptLogJson(log: unknown): AttemptLogEntry[] {
  if (!Array.isArray(log)) return [];
  const iso = (at: unknown) => (typeof at === 'string' ? new Date(at).toISOString() : null);
  return (log as Record<string, unknown>[]).map((entry) => ({
    attempt: Number(entry.attempt),
    outcome: entry.outcome === 'lost' ? 'lost' : 'failed',
    startedAt: iso(entry.startedAt),
    endedAt: iso(entry.endedAt) ?? new Date(0).toISOString(),
    drainer: typeof entry.drainer === 'string' ? entry.drainer : null,
    error: String(entry.error ?? ''),
  }));
}

/** A job as a list shows it: its payload's size and a preview. */
export function jobSummaryJson(job: JobSummary, registry?: JobRegistry): JobSummaryBody {
  return { ...commonJson(job), payloadBytes: job.payloadBytes, payloadPreview: payloadPreview(job, registry) };
}

function shownPayload(kind: string, payload: unknown, registry: JobRegistry | undefined): unknown {
  const redact = registry?.get(kind)?.redactPayload;
  return redact ? redact(payload) : payload;
}

/** The start of the payload's JSON: from the payload itself when it is small (redacted as its kind
 * says), else from the start of its text when its kind hides nothing; else null. */
function payloadPreview(job: JobSummary, registry: JobRegistry | undefined): string | null {
  let text: string;
  if (job.payloadBytes <= SUMMARY_PAYLOAD_BYTES)
    text = JSON.stringify(shownPayload(job.kind, job.smallPayload, registry)) ?? 'null';
  else if (!registry?.get(job.kind)?.redactPayload) text = job.payloadHead;
  else return null;
  return text.length > PAYLOAD_PREVIEW_CHARS ? `${text.slice(0, PAYLOAD_PREVIEW_CHARS - 1)}…` : text;
}

function commonJson(job: Omit<Job, 'payload' | 'attemptLog'>): Omit<JobBody, 'payload'> {
  return {
    id: job.id,
    kind: job.kind,
    status: job.status,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    priority: job.priority,
    groupKey: job.groupKey,
    dedupeKey: job.dedupeKey,
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
    version: job.version ?? 1,
    held: (job.held ?? null) as JobBody['held'],
  };
}

/** A workflow's step as the API shows it. */
export function stepJson(step: StoredStep): WorkflowStep {
  return {
    name: step.name,
    status: step.status,
    attempts: step.attempts,
    startedAt: step.startedAt.toISOString(),
    finishedAt: step.finishedAt?.toISOString() ?? null,
    result: (step.result ?? null) as WorkflowStep['result'],
    error: step.error,
    wakeAt: step.wakeAt?.toISOString() ?? null,
    event: step.event,
    key: step.eventKey,
    match: (step.eventMatch ?? null) as WorkflowStep['match'],
    childId: step.childId,
  };
}
