// The queue's constants that code outside the database layer needs too (the CLI's --help, the
// contract, the client's types), in a module that loads nothing: schema.ts re-exports them next to
// the tables, which need Drizzle.

/** The PostgreSQL schema that holds every table, function and the migrations table of pgdrain. */
export const PGDRAIN_SCHEMA = 'pgdrain';

/** pending, running and waiting are live; dead waits for a person; completed and cancelled are kept
 * only for kinds with keepCompletedSeconds (otherwise the row is deleted when it gets there). */
export const JOB_STATUSES = ['pending', 'running', 'dead', 'completed', 'cancelled', 'waiting'] as const;
/** The states a job can leave: what the queue still has to do something about. */
export const LIVE_STATUSES = ['pending', 'running', 'dead', 'waiting'] as const;
/** Where a job stays once it got there (a person may still retry or delete a dead one). */
export const FINAL_STATUSES = ['completed', 'dead', 'cancelled'] as const;

/** A kept job's result, as JSON, is at most this long (bytes). */
export const MAX_RESULT_BYTES = 64 * 1024;
/** ctx.progress() takes JSON of at most this many bytes. */
export const MAX_PROGRESS_BYTES = 8 * 1024;

/** What a job gets when neither its enqueue nor its kind says (pgdrain.enqueue() in SQL uses the
 * same: functionConstants()): its attempts, its priority, its handler's timeout, and the lease it
 * is claimed with when neither its kind nor its drainer says. The one place these are written. */
export const JOB_DEFAULTS = { maxAttempts: 3, priority: 0, timeoutMs: 30_000, visibilityTimeoutSeconds: 30 } as const;

/** Attempts a job may lose with its drainer — killed, or frozen past its lease — before it is dead.
 * Such an attempt is refunded (the job did not fail: its process did) and counted in
 * lost_attempts instead, so crashes that have nothing to do with the job do not spend its
 * max_attempts, while a job that kills its process every time still ends. */
export const MAX_LOST_ATTEMPTS = 5;

/** A job's attempt log (GET /jobs/:id `attemptLog`) keeps its last this many ended attempts: a job
 * with a larger max_attempts shows its latest ones, and its row stays small. */
export const MAX_ATTEMPT_LOG = 25;

/** Jobs claimed by one sidecar between two VACUUMs of the jobs table, unless VACUUM_EVERY_JOBS says
 * (sidecar/queue-vacuum.ts). */
export const DEFAULT_VACUUM_EVERY_JOBS = 25_000;

/** How long an event is kept for waits that begin after it, unless EVENT_RETENTION_SECONDS says. */
export const DEFAULT_EVENT_RETENTION_SECONDS = 86_400;

/** What a job kind's name (and a schedule's) may be; pgdrain.enqueue() in SQL checks the same
 * pattern (functionConstants()). */
export const KIND_PATTERN = /^[A-Za-z0-9_.:-]{1,100}$/;
export const KIND_PATTERN_MESSAGE = 'use 1-100 letters, digits, or _ . : -';

/** A job's own handler timeout (an enqueue's timeoutMs) lies within these; pgdrain.enqueue()'s
 * timeout_ms too. */
export const JOB_TIMEOUT_BOUNDS_MS = { min: 100, max: 86_400_000 } as const;

/** A job's max attempts lie within these. */
export const MAX_ATTEMPTS_BOUNDS = { min: 1, max: 100 } as const;

/** A job's priority lies within these (higher runs first); the table's CHECK says the same. */
export const PRIORITY_BOUNDS = { min: -1000, max: 1000 } as const;

/** The NOTIFY channel; each notification's payload is the kind of the job that became ready. */
export const NOTIFY_CHANNEL = 'pgdrain_jobs';
/** Where a running job someone asked to cancel is announced (payload: its id), so that the
 * drainer holding it stops its handler at once rather than at its next lease renewal. */
export const CANCEL_CHANNEL = 'pgdrain_cancel';
/** Where a job someone waits for is announced when it reaches a final state (payload: its id). */
export const FINISHED_CHANNEL = 'pgdrain_finished';

/** A dedupe key is 1 to this many characters. */
export const MAX_DEDUPE_KEY_LENGTH = 500;

/** A sidecar's stable identity (DRAINER_ID): it starts each of its lock tokens, so it holds no dot. */
export const DRAINER_ID_PATTERN = /^[A-Za-z0-9_-]{1,100}$/;

/** A group key is 1 to this many characters. */
export const MAX_GROUP_KEY_LENGTH = 200;

/**
 * The constants the SQL functions (src/sql/functions/*.sql) share with TypeScript, for their
 * `{{NAME}}` placeholders (db/functions.ts fills them in): each written once, here. A placeholder
 * stands inside the file's own quotes where it is text (`pg_notify('{{NOTIFY_CHANNEL}}', …)`), so
 * its quotes are doubled.
 */
export function functionConstants(): Record<string, string> {
  const text = (value: string) => value.replaceAll("'", "''");
  return {
    NOTIFY_CHANNEL: text(NOTIFY_CHANNEL),
    CANCEL_CHANNEL: text(CANCEL_CHANNEL),
    FINISHED_CHANNEL: text(FINISHED_CHANNEL),
    KIND_PATTERN: text(KIND_PATTERN.source),
    KIND_PATTERN_MESSAGE: text(KIND_PATTERN_MESSAGE),
    PRIORITY_MIN: String(PRIORITY_BOUNDS.min),
    PRIORITY_MAX: String(PRIORITY_BOUNDS.max),
    MAX_ATTEMPTS_MIN: String(MAX_ATTEMPTS_BOUNDS.min),
    MAX_ATTEMPTS_MAX: String(MAX_ATTEMPTS_BOUNDS.max),
    DEFAULT_MAX_ATTEMPTS: String(JOB_DEFAULTS.maxAttempts),
    DEFAULT_PRIORITY: String(JOB_DEFAULTS.priority),
    MAX_DEDUPE_KEY_LENGTH: String(MAX_DEDUPE_KEY_LENGTH),
    MAX_GROUP_KEY_LENGTH: String(MAX_GROUP_KEY_LENGTH),
    TIMEOUT_MIN_MS: String(JOB_TIMEOUT_BOUNDS_MS.min),
    TIMEOUT_MAX_MS: String(JOB_TIMEOUT_BOUNDS_MS.max),
  };
}

/**
 * Characters as every key's bound counts them, in TypeScript, over HTTP and in SQL alike: Unicode
 * code points, as PostgreSQL's length() and zod's string bounds count them (an emoji is one, not
 * the two UTF-16 units of String.length).
 */
export function characterCount(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** Why `text` cannot be a key of 1 to `max` characters (dedupe, group and event keys), or null. */
export function keyProblem(text: unknown, max: number): string | null {
  if (typeof text !== 'string') return `must be 1 to ${max} characters`;
  if (text.includes('\u0000')) return 'contains the NUL character (\\u0000), which PostgreSQL cannot store';
  if (!text.isWellFormed()) return 'contains a lone UTF-16 surrogate, which is not valid Unicode';
  const n = characterCount(text);
  return n < 1 || n > max ? `must be 1 to ${max} characters` : null;
}
export type JobStatus = (typeof JOB_STATUSES)[number];
