// Every table of the queue, all in the PostgreSQL schema `pgdrain` (nothing in `public`, where an
// application's own `jobs` table may already live). A job's states (the README draws the same):
//
//   waiting --every job it waits for (after) completed--> pending
//           --one of them ended dead or cancelled--------> dead
//   pending --claim--> running --complete--> completed (kept: keepCompletedSeconds) | row deleted
//                              --fail-----> pending (run_at pushed back) | dead (attempts spent)
//                              --release--> pending (attempt refunded; never started)
//                              --reap-----> pending | dead (its lease ran out)
//   pending, waiting --cancel--> cancelled (kept like completed, else deleted)
//   running --cancel--> running with cancel_requested_at: its drainer stops the handler, and
//                       whichever way the attempt ends (complete, fail, release, reap) it ends cancelled
//   completed, cancelled (kept) --the completing statement--> moved to job_history (below)
//   job_history --its day's keeps all over--> its partition dropped (the housekeeping round)
//   dead --retry--> pending; dead --delete--> deleted
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  customType,
  doublePrecision,
  index,
  integer,
  pgSchema,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';

import { JOB_DEFAULTS, JOB_STATUSES, MAX_GROUP_KEY_LENGTH, PGDRAIN_SCHEMA } from './constants.ts';

export {
  FINAL_STATUSES,
  JOB_DEFAULTS,
  JOB_STATUSES,
  JOB_TIMEOUT_BOUNDS_MS,
  KIND_PATTERN,
  KIND_PATTERN_MESSAGE,
  LIVE_STATUSES,
  MAX_DEDUPE_KEY_LENGTH,
  MAX_GROUP_KEY_LENGTH,
  MAX_ATTEMPT_LOG,
  MAX_LOST_ATTEMPTS,
  PGDRAIN_SCHEMA,
  PRIORITY_BOUNDS,
  type JobStatus,
} from './constants.ts';

export const pgdrainSchema = pgSchema(PGDRAIN_SCHEMA);

/** bigserial that travels as a string: ids outgrow JavaScript's safe integers long before the column does. */
const bigserialAsString = customType<{ data: string; driverData: string; notNull: true; default: true }>({
  dataType: () => 'bigserial',
});

/** A bigint (a job's id elsewhere) that travels as a string, as ids do. */
const bigintAsString = customType<{ data: string; driverData: string }>({ dataType: () => 'bigint' });

const timestamptz = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/** jsonb whose value the driver has parsed already (pg and Neon both parse jsonb): read as it comes.
 * Drizzle's own jsonb parses a string it is given a second time, so a payload or result that is a
 * JSON string reading as JSON ("123", "true", '{"a":1}') came back as a number, a boolean, an object. */
const jsonb = customType<{ data: unknown; driverData: unknown }>({
  dataType: () => 'jsonb',
  toDriver: (value) => JSON.stringify(value),
  fromDriver: (value) => value,
});

/** A job's columns but its id: the same in pgdrain.jobs and pgdrain.job_history. */
const jobColumns = () => ({
  kind: text('kind').notNull(),
  payload: jsonb('payload').notNull(),
  runAt: timestamptz('run_at').notNull().defaultNow(),
  attempts: integer('attempts').notNull().default(0),
  maxAttempts: integer('max_attempts').notNull().default(JOB_DEFAULTS.maxAttempts),
  lockedAt: timestamptz('locked_at'),
  lockedBy: text('locked_by'),
  /** When a running job's lease ends unless its drainer renews it: written by the claim and each
   * renewal from the lease the drainer holds, so every reaper applies that lease and none of its
   * own. NULL only for jobs locked by a drainer older than this column (the reaper then applies
   * its own timeout, as before). */
  lockedUntil: timestamptz('locked_until'),
  status: text('status', { enum: JOB_STATUSES }).notNull().default('pending'),
  lastError: text('last_error'),
  /** Enqueueing the same key again returns the existing job while its row exists. */
  dedupeKey: text('dedupe_key'),
  /** Per-job visibility timeout (the kind's); NULL means the claiming drainer's. */
  visibilitySeconds: integer('visibility_seconds'),
  /** Higher runs first among ready jobs; -1000..1000, default 0. */
  priority: integer('priority').notNull().default(JOB_DEFAULTS.priority),
  /** Jobs of one kind with the same key share its groupConcurrency (and, per group, its rate
   * limit): with a concurrency of 1, a key's jobs run one at a time, in order. */
  groupKey: text('group_key'),
  /** The handler's timeout for this job (an enqueue may override its kind's); NULL: the kind's. */
  timeoutMs: integer('timeout_ms'),
  /** How long the job stays once completed or cancelled (its kind's keepCompletedSeconds); NULL: deleted at once. */
  keepSeconds: integer('keep_seconds'),
  /** A kept job is deleted after this (the reaper prunes). */
  keepUntil: timestamptz('keep_until'),
  /** When it completed, died or was cancelled. */
  finishedAt: timestamptz('finished_at'),
  /** What the handler returned (kinds that keep their jobs). */
  result: jsonb('result'),
  /** What the handler last reported with ctx.progress(). */
  progress: jsonb('progress'),
  /** Someone asked to cancel it while it ran: its drainer aborts the handler at the next renewal. */
  cancelRequestedAt: timestamptz('cancel_requested_at'),
  /** Someone waits for it to finish (GET /jobs/:id?waitSeconds): its settlement says so. */
  watchedUntil: timestamptz('watched_until'),
  /** Jobs it waits for (`after`) that have not completed yet; it is `waiting` until 0. */
  waitingFor: integer('waiting_for'),
  /** Jobs wait for it: its settlement settles their counters. NULL: none. */
  hasDependents: boolean('has_dependents'),
  /** The W3C trace context of the enqueue (`00-<trace id>-<span id>-<flags>`): the handler's span
   * links to it. NULL when nothing traced the enqueue. */
  traceparent: text('traceparent'),
  createdAt: timestamptz('created_at').notNull().defaultNow(),
  /** A workflow run's version (defineWorkflow `version`), the one it started on; only drainers that
   * have that version claim it. NULL: version 1, or a kind without versions. */
  version: integer('version'),
  /** Attempts lost with their drainer (it died, or stopped renewing its lease): refunded, and
   * counted here instead; at MAX_LOST_ATTEMPTS the job is dead. */
  lostAttempts: integer('lost_attempts').notNull().default(0),
  /** Why a `waiting` run is held, when it is (its code no longer matches its history:
   * `{ code: 'workflow_changed', message, step, position, recorded, called, at }`); NULL otherwise. */
  held: jsonb('held'),
  /** Its attempts that ended without completing, oldest first, the last MAX_ATTEMPT_LOG of them:
   * `{ attempt, outcome: 'failed' | 'lost', startedAt, endedAt, drainer, error }`. Written only by
   * the statements that fail or reap an attempt: a job that completes first time writes nothing
   * here. NULL: none ended so. */
  attemptLog: jsonb('attempt_log'),
});

export const jobs = pgdrainSchema.table(
  'jobs',
  {
    id: bigserialAsString('id').primaryKey(),
    ...jobColumns(),
    /** The event that started it (a subscribed kind's job, enqueued by pgdrain.send_event()):
     * `{ id, event, key }` for ctx.event(); NULL for every other job. Not kept in the history. */
    startedBy: jsonb('started_by'),
    /** A dead job of a kind with a dead-letter kind (`deadLetter`): the job that statement enqueued
     * of it, to handle the death. Dead jobs stay in pgdrain.jobs, so this is not in the history. */
    deadLetterId: bigintAsString('dead_letter_id'),
  },
  (t) => [
    // The claim walks this index in its own order (priority first): it holds only claimable rows,
    // so its size follows the backlog, not the table's history.
    index('jobs_ready').on(t.priority.desc(), t.runAt, t.id).where(sql`status = 'pending'`),
    // The reaper's scan: only running rows, a handful at any time.
    index('jobs_running').on(t.lockedAt).where(sql`status = 'running'`),
    // Listing dead jobs newest first without walking the pending backlog.
    index('jobs_dead').on(t.id).where(sql`status = 'dead'`),
    // Kept jobs (kinds with keepCompletedSeconds): pruned when their time is up, listed newest first.
    index('jobs_kept').on(t.keepUntil).where(sql`status IN ('completed', 'cancelled')`),
    index('jobs_finished').on(t.id).where(sql`status IN ('completed', 'cancelled')`),
    uniqueIndex('jobs_dedupe_key').on(t.dedupeKey).where(sql`dedupe_key IS NOT NULL`),
    // What holds a group key: its running jobs, and its jobs waiting to retry (so a key's order is
    // kept across a retry). Only grouped jobs have entries: other kinds write nothing here.
    index('jobs_group_holders')
      .on(t.kind, t.groupKey)
      .where(sql`group_key IS NOT NULL AND (status = 'running' OR (status = 'pending' AND attempts > 0))`),
    // Fair kinds (fair: true) take turns across their group keys: the claim walks this index from
    // key to key (pgdrain.fair_keys()), one probe per key it visits. Only grouped jobs enter it.
    index('jobs_fair')
      .on(t.kind, t.priority.desc(), t.groupKey, t.runAt, t.id)
      .where(sql`status = 'pending' AND group_key IS NOT NULL`),
    check('jobs_status_valid', sql`status IN ('pending', 'running', 'dead', 'completed', 'cancelled', 'waiting')`),
    check('jobs_attempts_valid', sql`attempts >= 0 AND max_attempts >= 1`),
    check('jobs_visibility_valid', sql`visibility_seconds IS NULL OR visibility_seconds > 0`),
    check('jobs_priority_valid', sql`priority BETWEEN -1000 AND 1000`),
    check(
      'jobs_group_key_valid',
      sql`group_key IS NULL OR length(group_key) BETWEEN 1 AND ${sql.raw(String(MAX_GROUP_KEY_LENGTH))}`,
    ),
    check('jobs_running_is_locked', sql`(status = 'running') = (locked_at IS NOT NULL AND locked_by IS NOT NULL)`),
  ],
);

export type JobRow = typeof jobs.$inferSelect;

// Kept jobs (kinds with keepCompletedSeconds) once finished: moved out of pgdrain.jobs by the
// statement that completes them, so the hot table holds only live work. Partitioned by the day
// its keep ends (keep_until, UTC), one partition a day created ahead by the housekeeping round
// (pgdrain.maintain_history(), src/sql/functions/maintain_history.sql): a day whose keeps are all over is
// dropped whole — no per-row DELETE, no bloat, no VACUUM debt. A default partition takes any row
// no day partition is there for (housekeeping that did not run for a month), pruned row by row.
// Kept jobs with a dedupe key stay in pgdrain.jobs (its unique index holds their key, which no
// index across partitions can), as do rows finished by an older version until housekeeping moves them.
export const jobHistory = pgdrainSchema.table(
  'job_history',
  {
    id: bigintAsString('id').notNull(),
    ...jobColumns(),
    keepUntil: timestamptz('keep_until').notNull(),
  },
  (t) => [index('job_history_id').on(t.id)],
);

/** Every job a reader may look up: the live ones (and kept ones left in pgdrain.jobs) and the
 * history whose keep is not over. getJob, lists, waits and dependencies read this. */
export const jobsAndHistory = pgdrainSchema
  .view('jobs_and_history', {
    id: bigintAsString('id').notNull(),
    ...jobColumns(),
  })
  .existing();

// Completed jobs are deleted, so what happened to them is counted here: one row per kind per
// minute, added to by the statement that settles a batch (never once per job), in the same
// statement, so a count can neither drift from the rows nor outlive a settlement lost in a crash. `failed` counts
// failed attempts (a retry or a death, including an attempt the reaper timed out); `dead` counts
// jobs that became dead. Rows older than a day are folded into job_totals by rollUpCounts() (the
// sidecar's reaper round, every Worker cron invocation).
const counter = (name: string) => bigint(name, { mode: 'number' }).notNull().default(0);

export const jobCounts = pgdrainSchema.table(
  'job_counts',
  {
    minute: timestamptz('minute').notNull(),
    kind: text('kind').notNull(),
    completed: counter('completed'),
    failed: counter('failed'),
    dead: counter('dead'),
    /** Workflow runs held because their code no longer matches their history. */
    diverged: counter('diverged'),
  },
  (t) => [primaryKey({ name: 'job_counts_pkey', columns: [t.minute, t.kind] })],
);

/** Everything counted before job_counts' retention, per kind: with it the totals never go down. */
export const jobTotals = pgdrainSchema.table('job_totals', {
  kind: text('kind').primaryKey(),
  completed: counter('completed'),
  failed: counter('failed'),
  dead: counter('dead'),
  diverged: counter('diverged'),
});

/** Kinds no drainer may claim until they are resumed (the claim reads this table in its one
 * statement). Enqueueing a paused kind still works. */
export const pausedKinds = pgdrainSchema.table('paused_kinds', {
  kind: text('kind').primaryKey(),
  pausedAt: timestamptz('paused_at').notNull().defaultNow(),
});

// One row per recurring schedule that has ever been evaluated: the last slot enqueued, advanced in
// the transaction that enqueues, under the row's lock, so any number of evaluators (sidecars,
// Worker invocations) enqueue each slot once. A schedule removed from code leaves its row unused.
export const schedules = pgdrainSchema.table('schedules', {
  name: text('name').primaryKey(),
  /** The latest slot handled — enqueued, skipped, or, at the first evaluation, the time it
   * happened; NULL until then. Evaluation starts after it. */
  lastSlot: timestamptz('last_slot'),
  /** The latest slot a job was actually enqueued for; NULL: never (what the dashboard shows). */
  lastEnqueuedSlot: timestamptz('last_enqueued_slot'),
  /** Slots missed beyond the schedule's backfill window, skipped rather than enqueued. */
  skipped: bigint('skipped', { mode: 'number' }).notNull().default(0),
  evaluatedAt: timestamptz('evaluated_at').notNull().defaultNow(),
});

// The starts of rate-limited kinds within their window: a claim of such a kind counts the rows of
// its window (per group key, where the kind limits per group), adds one per job it starts, and
// deletes what has left the window — all under the kind's claim lock, so the table holds at most
// `limit` rows per kind (and group) at any time. Kinds without a rate limit write nothing here.
export const rateStarts = pgdrainSchema.table(
  'rate_starts',
  {
    kind: text('kind').notNull(),
    /** '' for a kind limited as a whole. */
    groupKey: text('group_key').notNull().default(''),
    startedAt: timestamptz('started_at').notNull(),
  },
  (t) => [index('rate_starts_window').on(t.kind, t.groupKey, t.startedAt)],
);

// `after`: a job that waits for others. A row per (job, what it waits for); the waiting job counts
// the ones not completed yet in jobs.waiting_for, and the statement that completes a job it waits for
// lowers that count (or, when one ends dead or cancelled, makes it dead). Rows of jobs that are gone
// are pruned by the reaper: no foreign key, so completing a job costs no lookup here unless it has
// dependents.
export const jobDependencies = pgdrainSchema.table(
  'job_dependencies',
  {
    dependsOn: bigintAsString('depends_on').notNull(),
    jobId: bigintAsString('job_id').notNull(),
  },
  (t) => [
    primaryKey({ name: 'job_dependencies_pkey', columns: [t.dependsOn, t.jobId] }),
    index('job_dependencies_job').on(t.jobId),
  ],
);

// How a job someone waited for ended, when its row was not kept: written by the statement that
// deletes it (only for watched jobs), read by GET /jobs/:id?waitSeconds, pruned after a few minutes.
export const finishedJobs = pgdrainSchema.table('finished_jobs', {
  id: bigintAsString('id').primaryKey(),
  kind: text('kind').notNull(),
  status: text('status', { enum: JOB_STATUSES }).notNull(),
  finishedAt: timestamptz('finished_at').notNull().defaultNow(),
});

// Workflow runs an ending statement passed by: a run parked on a child that ended while the run's
// row was locked by someone else (pgdrain.after_jobs_ended() locks runs SKIP LOCKED, since
// waiting could deadlock with a park). The next housekeeping round looks at each again and makes
// it pending if it still waits for a child that has ended (prune.ts).
export const runsToRecheck = pgdrainSchema.table('runs_to_recheck', {
  runId: bigintAsString('run_id').primaryKey(),
  since: timestamptz('since').notNull().defaultNow(),
});

// Durable workflows (src/workflows/): a workflow is a job whose run is re-entered from the top at
// each attempt; every step it reached is a row here, keyed by the job and the step's name. A step
// whose row says `completed` returns its stored result instead of running again.
//   completed  its outcome is stored (result); sleeps that ended and waits that were answered too
//   failed     its last run threw (error, attempts): it runs again at the job's next attempt
//   sleeping   the job is `pending` with run_at = wake_at, like a retry's backoff: the claim at
//              that time re-enters the run, and the sleep's step completes then
//   waiting    for an event (event, event_key): the job is `waiting`, or `pending` until wake_at
//              (its timeout) when it has one, and pgdrain.send_event() makes it due at once; or for
//              a child job (child_id): `waiting`, and the `after` machinery wakes it when the child ends
// Written fenced by the job's lock token, so a drainer that lost its lease writes nothing; a
// transactional step's row commits in the step's own transaction, with its writes. Rows of
// workflows that are gone are pruned by the housekeeping round.
export const WORKFLOW_STEP_STATUSES = ['completed', 'failed', 'sleeping', 'waiting'] as const;
export const workflowSteps = pgdrainSchema.table(
  'workflow_steps',
  {
    jobId: bigintAsString('job_id').notNull(),
    name: text('name').notNull(),
    /** The order the run first reached its steps in (the timeline's order). */
    position: integer('position').notNull(),
    status: text('status', { enum: WORKFLOW_STEP_STATUSES }).notNull(),
    /** Runs of it, counting the one that completed it. */
    attempts: integer('attempts').notNull().default(0),
    result: jsonb('result'),
    error: text('error'),
    startedAt: timestamptz('started_at').notNull().defaultNow(),
    finishedAt: timestamptz('finished_at'),
    /** A sleep's end; a wait's timeout. */
    wakeAt: timestamptz('wake_at'),
    event: text('event'),
    eventKey: text('event_key'),
    /** A wait's match: a JSON object the event's payload must contain (`payload @> event_match`). */
    eventMatch: jsonb('event_match'),
    /** The event that answered a wait (a later wait on the same event and key takes a later one). */
    eventId: bigintAsString('event_id'),
    /** step.invoke's child job. */
    childId: bigintAsString('child_id'),
    /** What the run called: run, sleep, sleepUntil, waitForEvent, invoke, patched. A replay that
     * calls the name as another type has diverged. NULL: written before types were recorded. */
    type: text('type'),
  },
  (t) => [
    primaryKey({ name: 'workflow_steps_pkey', columns: [t.jobId, t.name] }),
    // pgdrain.send_event(): the runs waiting for an event and key.
    index('workflow_steps_event').on(t.event, t.eventKey).where(sql`status = 'waiting' AND event IS NOT NULL`),
    check('workflow_steps_status_valid', sql`status IN ('completed', 'failed', 'sleeping', 'waiting')`),
  ],
);

// Events (sendEvent, pgdrain.send_event, POST /events): inserted in the sender's transaction, which
// also wakes every run waiting for the event and key. Kept for a retention window (a day by
// default) so a run that reaches its wait after the event was sent (but was enqueued before it)
// still finds it; pruned by the housekeeping round.
export const workflowEvents = pgdrainSchema.table(
  'events',
  {
    id: bigserialAsString('id').primaryKey(),
    event: text('event').notNull(),
    eventKey: text('event_key').notNull(),
    payload: jsonb('payload'),
    sentAt: timestamptz('sent_at').notNull().defaultNow(),
    // The id its sender gave it (a webhook's delivery id): a repeat of the same event name and id,
    // while the first is kept, is dropped (pgdrain.send_event()).
    senderId: text('sender_id'),
  },
  (t) => [
    index('events_lookup').on(t.event, t.eventKey, t.id),
    index('events_sent').on(t.sentAt),
    uniqueIndex('events_sender_id').on(t.event, t.senderId).where(sql`sender_id IS NOT NULL`),
  ],
);

// Kinds that subscribe to events (defineJob / defineWorkflow `on`): one row per event and kind,
// written when a drainer starts with its kinds (and by `pgdrain migrate --jobs`), with the kind's
// options its jobs are enqueued with. pgdrain.send_event() enqueues one job of every kind subscribed
// at that moment, in the sender's transaction — so an event sent from SQL while no pgdrain process
// is up still starts its work. A kind no longer registered keeps its row until unsubscribed
// (unsubscribe(), `pgdrain unsubscribe KIND EVENT`): a rolling deploy loses nothing.
export const subscriptions = pgdrainSchema.table(
  'subscriptions',
  {
    event: text('event').notNull(),
    kind: text('kind').notNull(),
    maxAttempts: integer('max_attempts').notNull().default(JOB_DEFAULTS.maxAttempts),
    priority: integer('priority').notNull().default(JOB_DEFAULTS.priority),
    keepSeconds: integer('keep_seconds'),
    visibilitySeconds: integer('visibility_seconds'),
    subscribedAt: timestamptz('subscribed_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ name: 'subscriptions_pkey', columns: [t.event, t.kind] })],
);

// Kinds with a dead-letter kind (defineJob `deadLetter`), written with the subscriptions: when a job
// of `kind` goes dead — its attempts spent, a PermanentJobError, a timeout on its last try, a lease
// that ran out on it, a workflow run that died —, the statement that makes it dead enqueues a job of
// `dead_letter` (with these options) whose payload describes the dead one.
export const deadLetterRoutes = pgdrainSchema.table('dead_letter_routes', {
  kind: text('kind').primaryKey(),
  deadLetter: text('dead_letter').notNull(),
  maxAttempts: integer('max_attempts').notNull().default(JOB_DEFAULTS.maxAttempts),
  priority: integer('priority').notNull().default(JOB_DEFAULTS.priority),
  keepSeconds: integer('keep_seconds'),
  routedAt: timestamptz('routed_at').notNull().defaultNow(),
});

// Workflow runs that an event cancels (defineWorkflow `cancelOn`): a row per run and (event, key),
// written by the run at each attempt (under the event's lock, checking for such an event sent since
// the run was enqueued). pgdrain.send_event() cancels every live run listed for its event and key,
// with its children, as pgdrain.cancel() does. Rows of runs that are over are pruned.
export const cancelTriggers = pgdrainSchema.table(
  'cancel_triggers',
  {
    event: text('event').notNull(),
    eventKey: text('event_key').notNull(),
    jobId: bigintAsString('job_id').notNull(),
  },
  (t) => [primaryKey({ name: 'cancel_triggers_pkey', columns: [t.event, t.eventKey, t.jobId] })],
);

// Limits per group key, from data (setGroupLimits, pgdrain.set_group_limits, PUT
// /kinds/:kind/groups/:key/limits): a row overrides, for that key of that kind, the kind's
// groupConcurrency (concurrency) and its per-group rate limit (rate_limit per rate_period_seconds)
// — a paying tenant 10 at once, a free one 1. The limited claim (queries/claim-limited.ts) reads
// the rows of its candidate keys in its one statement: a change takes effect at the next claim of
// every drainer.
export const groupLimits = pgdrainSchema.table(
  'group_limits',
  {
    kind: text('kind').notNull(),
    groupKey: text('group_key').notNull(),
    concurrency: integer('concurrency'),
    rateLimit: integer('rate_limit'),
    ratePeriodSeconds: doublePrecision('rate_period_seconds'),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ name: 'group_limits_pkey', columns: [t.kind, t.groupKey] }),
    check('group_limits_concurrency_valid', sql`concurrency IS NULL OR concurrency >= 1`),
    check(
      'group_limits_rate_valid',
      // One string, as the migration has it (drizzle-kit compares the text).
      sql.raw(
        '(rate_limit IS NULL) = (rate_period_seconds IS NULL) AND (rate_limit IS NULL OR (rate_limit >= 1 AND ' +
          'rate_period_seconds > 0 AND rate_period_seconds <= 86400))',
      ),
    ),
    check('group_limits_something', sql`concurrency IS NOT NULL OR rate_limit IS NOT NULL`),
  ],
);

// Fair kinds' turns: the group key a kind's last fair claim ended its round at (at the priority it
// claimed), so the next claim goes on from the key after it. Written by the limited claim under
// the kind's lock (queries/claim-limited.ts).
export const fairTurns = pgdrainSchema.table('fair_turns', {
  kind: text('kind').primaryKey(),
  priority: integer('priority').notNull(),
  /** NULL: the next round starts from the first key. */
  groupKey: text('group_key'),
  updatedAt: timestamptz('updated_at').notNull().defaultNow(),
});

// The kinds the drainers define, as the database knows them: every drainer writes its kinds here
// when it starts (and `pgdrain migrate --jobs` does), so a job enqueued by the kind's name alone —
// from SQL (pgdrain.enqueue()), from code that does not have the definition — gets the columns a
// typed enqueue of the kind writes (pgdrain.enqueue_job(), from_kind; the bulk enqueue). The newest
// write wins (a rolling deploy: the new definition), and says who wrote it and when. `code`: a hash
// of each version's code, by version: a deploy that changes it replays the kind's parked workflow
// runs once, so a change that departs from their history holds them at once rather than when their
// event comes.
export const kinds = pgdrainSchema.table('kinds', {
  kind: text('kind').primaryKey(),
  /** The highest version its writer registered: what new jobs of it start on. */
  version: integer('version').notNull().default(1),
  /** The columns an enqueue by name fills in, as a typed enqueue writes them (NULL: the table's
   * default). */
  maxAttempts: integer('max_attempts'),
  priority: integer('priority'),
  visibilitySeconds: integer('visibility_seconds'),
  keepSeconds: integer('keep_seconds'),
  /** Every option the kind sets, for readers (GET /kinds, `pgdrain kinds`, the dashboard) and for
   * telling two writers' definitions apart: { maxAttempts, backoff, timeoutMs, concurrency, … }. */
  options: jsonb('options').notNull(),
  /** Each registered version's code, hashed: { "1": "…", "2": "…" }. */
  code: jsonb('code').notNull(),
  writtenBy: text('written_by').notNull(),
  writtenAt: timestamptz('written_at').notNull().defaultNow(),
});

/** Each sidecar's DRAINER_ID while a process holds it (queries/drainer-identity.ts): a lease row, so
 * that the name's protection does not hang on one server session surviving (a transaction pooler
 * gives none). The holder renews it every few seconds and deletes it when it stops. */
export const drainers = pgdrainSchema.table('drainers', {
  drainerId: text('drainer_id').primaryKey(),
  /** The holding process's worker id (`sidecar-<id>.<host>.<pid>.<random>`). */
  holder: text('holder').notNull(),
  /** The holder's own server session (its backend's pid and start), when it has one of its own (no
   * transaction pooler): gone from pg_stat_activity means the holder is gone, without waiting. */
  sessionPid: integer('session_pid'),
  sessionStarted: timestamptz('session_started'),
  renewedAt: timestamptz('renewed_at').notNull().defaultNow(),
  takenAt: timestamptz('taken_at').notNull().defaultNow(),
});
