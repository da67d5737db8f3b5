// The HTTP API's contract: every request and response body as a zod schema, in one place. The app
// validates requests with these (src/http/app.ts), the OpenAPI document at /openapi.json is
// generated from them (src/http/openapi.ts), and the typed client's types are inferred from them
// (src/client/index.ts) — so the three cannot drift apart.
import { z } from 'zod';
import {
  FINAL_STATUSES,
  JOB_STATUSES,
  KIND_PATTERN,
  KIND_PATTERN_MESSAGE,
  MAX_DEDUPE_KEY_LENGTH,
  MAX_GROUP_KEY_LENGTH,
} from '../db/schema.ts';
import {
  JOB_ID_PATTERN,
  JOB_OPTIONS,
  type JobOptionName,
  MAX_AFTER,
  RUN_AT_BOUNDS,
  describeOption,
  jobId,
} from '../jobs/job-options.ts';
import { MAX_RATE_PERIOD_SECONDS, MIN_RATE_PERIOD_SECONDS } from '../jobs/definition.ts';
import { isJobId } from '../queries/inspect.ts';

export { JOB_ID_PATTERN, MAX_AFTER };
export const MAX_BATCH = 1000;
/** GET /jobs/:id?waitSeconds= lies within these. */
export const WAIT_SECONDS_BOUNDS = { min: 1, max: 60 } as const;
export const MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600;

const KIND_MESSAGE = `not a job kind: ${KIND_PATTERN_MESSAGE}`;
const timestamp = z.iso.datetime({ offset: true }).meta({ description: 'ISO-8601 date and time.' });
const jobStatus = z.enum(JOB_STATUSES);
// Any JSON value. Bodies are parsed JSON already, and src/http/input.ts walks them once (size, depth,
// what PostgreSQL cannot store): a second, recursive check here cost 0.6 s of CPU for a 1 MB payload
// of 330k empty objects.
const jsonValue = z
  .unknown()
  .meta({ id: 'JsonValue', description: "Any JSON value (a job's payload; its kind's schema validates it)." });

// --- requests ------------------------------------------------------------------------------------

/** An option over HTTP: the one schema's bounds and meaning (src/jobs/job-options.ts). */
const option = <K extends JobOptionName>(name: K) =>
  (JOB_OPTIONS[name] as z.ZodType).optional().meta(JOB_OPTIONS[name].meta()!) as unknown as z.ZodOptional<
    (typeof JOB_OPTIONS)[K]
  >;

export const jobInput = z
  .strictObject({
    kind: z.string().min(1).max(100).meta({ description: 'A registered job kind.', example: 'send_receipt' }),
    payload: jsonValue.refine((v) => v !== undefined, 'required: any JSON value'),
    // JSON has no dates: an ISO-8601 string, bounded as the option is.
    runAt: timestamp
      .refine(
        (t) => Date.parse(t) >= RUN_AT_BOUNDS.earliest && Date.parse(t) < RUN_AT_BOUNDS.latest,
        'must be between 1970-01-01 and 9999-12-31',
      )
      .optional()
      .meta({ description: `${describeOption('runAt')} ISO-8601; not with delaySeconds.` }),
    delaySeconds: z
      .number()
      .min(0)
      .max(MAX_DELAY_SECONDS)
      .optional()
      .meta({ description: 'Run no sooner than this many seconds from now. Not with runAt.' }),
    maxAttempts: option('maxAttempts'),
    dedupeKey: option('dedupeKey'),
    dedupeMode: option('dedupeMode'),
    groupKey: option('groupKey'),
    priority: option('priority'),
    runNow: z
      .boolean()
      .optional()
      .meta({ description: 'Run it right after the response (the Worker); the sidecar runs it at once anyway.' }),
    after: option('after'),
    timeoutMs: option('timeoutMs'),
  })
  .refine((j) => j.runAt === undefined || j.delaySeconds === undefined, {
    message: 'give runAt or delaySeconds, not both',
    path: ['delaySeconds'],
  })
  .refine((j) => j.dedupeMode === undefined || j.dedupeKey !== undefined, {
    message: 'dedupeMode needs a dedupeKey',
    path: ['dedupeMode'],
  })
  .meta({ id: 'JobInput' });
export type JobInput = z.input<typeof jobInput>;

/** The jobs of one batch wait for at most this many jobs in all (`after`): what one request may make
 * the database lock and write (a dependency row each). */
export const MAX_BATCH_AFTER = 10_000;
export const batchInput = z
  .strictObject({
    jobs: z
      .array(jobInput)
      .min(1)
      .max(MAX_BATCH)
      .refine(
        (jobs) => jobs.reduce((n, j) => n + (j.after?.length ?? 0), 0) <= MAX_BATCH_AFTER,
        `the jobs of one batch wait for at most ${MAX_BATCH_AFTER} jobs in all (after); send the rest in more requests`,
      ),
  })
  .meta({ id: 'BatchInput' });

/** GET /jobs?payload= is at most this long: a search, not a document. */
export const MAX_PAYLOAD_MATCH_CHARS = 2000;

/** True when `text` is JSON for an object PostgreSQL can read as jsonb (what a payload search
 * matches with): no string or key holds U+0000 or a lone surrogate. */
function isJsonObjectText(text: string): boolean {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  const storable = (v: unknown): boolean =>
    typeof v === 'string'
      ? !v.includes('\u0000') && v.isWellFormed()
      : v === null || typeof v !== 'object' || Object.entries(v).every(([k, x]) => storable(k) && storable(x));
  return value !== null && typeof value === 'object' && !Array.isArray(value) && storable(value);
}

export const listQuery = z.strictObject({
  status: jobStatus.optional().meta({ description: 'Only jobs in this state.' }),
  kind: z.string().regex(KIND_PATTERN, KIND_MESSAGE).optional().meta({ description: 'Only jobs of this kind.' }),
  dedupeKey: z
    .string()
    .min(1)
    .max(MAX_DEDUPE_KEY_LENGTH)
    .optional()
    .meta({ description: 'Only the job with this dedupe key (while its row exists).' }),
  groupKey: z
    .string()
    .min(1)
    .max(MAX_GROUP_KEY_LENGTH)
    .optional()
    .meta({ description: 'Only jobs of this group key (groupConcurrency, fair kinds, per-key rates).' }),
  payload: z
    .string()
    .max(MAX_PAYLOAD_MATCH_CHARS)
    .refine(isJsonObjectText, 'a JSON object the payload must contain, such as {"orderId":42}')
    .optional()
    .meta({
      description:
        'Only jobs whose payload contains this JSON object (PostgreSQL `@>`: {"orderId":42} finds ' +
        '{"orderId":42,"total":9}). Reads the jobs newest first until the page is full: narrow it with kind or ' +
        'status on a large table. Kinds that hide part of their payload (the webhook kind) are never matched.',
      example: '{"orderId":42}',
    }),
  limit: z.coerce.number<number>().int().min(1).max(500).default(50).meta({ description: 'Page size, 1-500.' }),
  cursor: z
    .string()
    .regex(JOB_ID_PATTERN, 'not a cursor returned by this API')
    .refine(isJobId, 'not a cursor returned by this API')
    .optional()
    .meta({ description: 'nextCursor of the previous page.' }),
});
export type ListQuery = z.input<typeof listQuery>;

export const getJobQuery = z.strictObject({
  waitSeconds: z.coerce
    .number<number>()
    .int()
    .min(WAIT_SECONDS_BOUNDS.min)
    .max(WAIT_SECONDS_BOUNDS.max)
    .optional()
    .meta({
      description:
        `Wait up to this many seconds (${WAIT_SECONDS_BOUNDS.min}-${WAIT_SECONDS_BOUNDS.max}) for the ` +
        `job to be completed, dead or cancelled; the answer comes as soon as it is, else with its state then.`,
    }),
});
export type GetJobQuery = z.input<typeof getJobQuery>;

export const retryInput = z.strictObject({
  fromStep: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .meta({
      description:
        'A workflow run (dead, completed or cancelled) runs again from this step: its record and the later ' +
        "steps' are dropped, the earlier ones kept.",
    }),
});

export type RetryInput = z.input<typeof retryInput>;

export const bulkInput = z.strictObject({
  kind: z.string().min(1).max(100).optional().meta({ description: 'Only this kind; every kind when absent.' }),
});

export const throughputQuery = z.strictObject({
  minutes: z.coerce
    .number<number>()
    .int()
    .min(1)
    .max(1440)
    .default(60)
    .meta({ description: 'How many minutes back, 1-1440.' }),
  kind: z.string().regex(KIND_PATTERN, KIND_MESSAGE).optional().meta({ description: 'Only this kind.' }),
});
export type ThroughputQuery = z.input<typeof throughputQuery>;

export const jobIdParam = z.strictObject({ id: jobId });
export const kindParam = z.strictObject({ kind: z.string().meta({ description: 'A job kind.', example: 'webhook' }) });
export const subscriptionParam = z.strictObject({
  kind: z.string().meta({ description: 'A job kind.', example: 'send-receipt' }),
  event: z.string().meta({ description: 'An event it subscribes to.', example: 'order.paid' }),
});
export const unsubscribed = z.object({ kind: z.string(), event: z.string(), unsubscribed: z.literal(true) });
export type Unsubscribed = z.output<typeof unsubscribed>;

// --- responses -----------------------------------------------------------------------------------

export const apiErrorBody = z
  .object({
    error: z.object({
      code: z.string().meta({
        description: 'Stable, machine-readable: invalid_request, unauthorized, not_found, …',
        example: 'invalid_request',
      }),
      message: z.string().meta({ description: 'For people: what was wrong and how to fix it.' }),
    }),
  })
  .meta({ id: 'Error' });
export type ApiErrorBody = z.output<typeof apiErrorBody>;

export const enqueued = z
  .object({
    id: jobId,
    status: jobStatus,
    runAt: timestamp,
    deduplicated: z
      .literal(true)
      .optional()
      .meta({ description: 'Present (200) when a job with the same key already existed.' }),
    replaced: z.literal(true).optional().meta({
      description:
        "Present (200) when dedupeMode 'replace' gave the pending job with the key this payload and run time.",
    }),
  })
  .meta({ id: 'Enqueued' });
export type Enqueued = z.output<typeof enqueued>;

const runNowAnswer = z.object({ started: z.int().min(0), deferred: z.int().min(0) });
const runNowNote = 'The Worker, when jobs asked to run now: how many started, how many wait for the cron.';
export const batchEnqueued = z
  .object({
    ids: z.array(jobId).meta({ description: 'In the order of the request.' }),
    runNow: runNowAnswer.optional().meta({ description: runNowNote }),
  })
  .meta({ id: 'BatchEnqueued' });
export type BatchEnqueued = z.output<typeof batchEnqueued>;

export const job = z
  .object({
    id: jobId,
    kind: z.string(),
    payload: jsonValue,
    status: jobStatus,
    attempts: z.int().min(0),
    maxAttempts: z.int().min(1),
    priority: z.int(),
    groupKey: z.string().nullable(),
    dedupeKey: z.string().nullable().meta({ description: 'Its dedupe key (enqueued with one), else null.' }),
    runAt: timestamp,
    lockedAt: timestamp.nullable(),
    lockedBy: z.string().nullable(),
    lastError: z.string().nullable(),
    createdAt: timestamp,
    finishedAt: timestamp.nullable().meta({ description: 'When it was completed, cancelled or became dead.' }),
    result: jsonValue
      .nullable()
      .meta({ description: 'What its handler returned (kinds with keepCompletedSeconds; null otherwise).' }),
    progress: jsonValue.nullable().meta({ description: 'What its handler last reported with ctx.progress().' }),
    cancelRequested: z.boolean().meta({ description: 'Someone asked to cancel it while it ran: it ends cancelled.' }),
    waitingFor: z
      .int()
      .min(0)
      .nullable()
      .meta({ description: 'While waiting: how many of the jobs it waits for (after) have not completed yet.' }),
    timeoutMs: z
      .int()
      .nullable()
      .meta({ description: "The handler's timeout for this job, when its enqueue set one." }),
    version: z.int().min(1).meta({
      description: "The kind's version it was enqueued on (1 unless the kind has versions); it runs on that version.",
    }),
    held: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({
        description:
          "A workflow run held because a deploy's code departed from its history: what differed (code " +
          'workflow_changed, the step, what was recorded and what the code called); lastError says it in words. ' +
          'A drainer that starts with the kind lets it replay; POST /jobs/:id/retry with fromStep restarts it.',
        example: { code: 'workflow_changed', step: 'charge-card', recorded: null, called: 'run', version: 1 },
      }),
    deadLetterJobId: z.string().nullable().optional().meta({
      description:
        'A dead job of a kind with a dead-letter kind (deadLetter): the job its death enqueued (GET /jobs/:id only).',
    }),
    attemptLog: z
      .array(z.lazy(() => attemptLogEntry))
      .optional()
      .meta({
        description:
          'Its attempts that failed or were lost, oldest first (the last 25), each with its drainer and error ' +
          '(GET /jobs/:id only). A running attempt is lockedAt/lockedBy; the one that completed it, finishedAt.',
      }),
    dependsOn: z
      .array(z.lazy(() => linkedJob))
      .optional()
      .meta({ description: 'The jobs it waits or waited for (after), with their state (GET /jobs/:id only).' }),
    dependents: z
      .array(z.lazy(() => linkedJob))
      .optional()
      .meta({ description: 'The jobs waiting or that waited for it (GET /jobs/:id only).' }),
    steps: z
      .array(z.lazy(() => workflowStep))
      .optional()
      .meta({ description: 'A workflow: the steps its run has reached, in order (GET /jobs/:id only).' }),
    waitingOn: z
      .lazy(() => workflowStep)
      .nullable()
      .optional()
      .meta({
        description:
          'A parked workflow (waiting, or pending until a sleep ends or a wait times out): the step it waits on — ' +
          'until when (wakeAt), for what event and key, or for which child job.',
      }),
  })
  .meta({ id: 'Job' });
export type Job = z.output<typeof job>;

/** One attempt of a job that failed or was lost (GET /jobs/:id attemptLog). */
export const attemptLogEntry = z
  .object({
    attempt: z.int().min(0).meta({ description: 'Its number (attempts restart at 0 when a person retries the job).' }),
    outcome: z.enum(['failed', 'lost']).meta({
      description: 'failed: its handler threw or timed out; lost: its drainer died or stopped renewing the lease.',
    }),
    startedAt: timestamp.nullable(),
    endedAt: timestamp,
    drainer: z.string().nullable().meta({ description: 'The lock token of the drainer that ran it.' }),
    error: z.string().meta({ description: 'Why it ended (up to 4,000 characters).' }),
  })
  .meta({ id: 'AttemptLogEntry' });
export type AttemptLogEntry = z.output<typeof attemptLogEntry>;

/** A job another one names: a dependency or a dependent. */
export const linkedJob = z
  .object({
    id: jobId,
    kind: z.string().nullable().meta({ description: 'null: its row is gone (completed and not kept).' }),
    status: jobStatus.nullable().meta({ description: 'null: its row is gone (completed and not kept).' }),
  })
  .meta({ id: 'LinkedJob' });
export type LinkedJob = z.output<typeof linkedJob>;

/** A workflow's step as GET /jobs/:id shows it. */
export const workflowStep = z
  .object({
    name: z.string(),
    status: z.enum(['completed', 'failed', 'sleeping', 'waiting']).meta({
      description:
        'completed: its outcome is stored; failed: its last run threw (it runs again at the next attempt); sleeping ' +
        '/ waiting: the run waits on it.',
    }),
    attempts: z.int().min(0),
    startedAt: timestamp,
    finishedAt: timestamp.nullable(),
    result: jsonValue
      .nullable()
      .meta({ description: 'What it returned (an event wait: the payload, or null at its timeout).' }),
    error: z.string().nullable().meta({ description: 'Why its last run failed.' }),
    wakeAt: timestamp
      .nullable()
      .meta({ description: "A sleep's end, a wait's timeout, a failed step's next try (its own maxAttempts)." }),
    event: z.string().nullable(),
    key: z.string().nullable(),
    match: z.record(z.string(), jsonValue).nullable().meta({
      description: "A wait's match: an object the event's payload must contain (null: any event of its name and key).",
    }),
    childId: jobId.nullable().meta({ description: 'step.invoke: the child job.' }),
  })
  .meta({ id: 'WorkflowStep' });
export type WorkflowStep = z.output<typeof workflowStep>;

export const eventInput = z
  .strictObject({
    event: z
      .string()
      .regex(KIND_PATTERN, KIND_PATTERN_MESSAGE)
      .meta({ description: "The event's name (like a kind's).", example: 'email.verified' }),
    key: z
      .string()
      .min(1)
      .max(MAX_DEDUPE_KEY_LENGTH)
      .meta({ description: 'Which waits it answers.', example: 'user:42' }),
    payload: jsonValue.optional().meta({ description: 'What the waits return (JSON, at most 64 KiB); default {}.' }),
    id: z
      .string()
      .min(1)
      .max(MAX_DEDUPE_KEY_LENGTH)
      .optional()
      .meta({
        description:
          "Its sender's id (a webhook's delivery id): sent again with the same event and id while the first is " +
          'kept (EVENT_RETENTION_SECONDS), it is dropped and the first one answers.',
        example: 'evt_01J9Z',
      }),
  })
  .meta({ id: 'EventInput' });
export type EventInput = z.input<typeof eventInput>;

export const eventSent = z
  .object({
    id: z.string().meta({ description: "The event's id (a repeat of a sender's id: the first's)." }),
    event: z.string(),
    key: z.string(),
  })
  .meta({ id: 'EventSent' });
export type EventSent = z.output<typeof eventSent>;

export const jobSummary = job
  .omit({ payload: true, steps: true, waitingOn: true, attemptLog: true, dependsOn: true, dependents: true })
  .extend({
    payloadBytes: z
      .int()
      .min(0)
      .meta({ description: "The payload's size as JSON, in bytes (GET /jobs/:id has the payload itself)." }),
    payloadPreview: z
      .string()
      .nullable()
      .meta({
        description:
          'The start of the payload as JSON (at most 120 characters, secrets its kind hides left out); null when it ' +
          'is too large to show safely.',
      }),
  })
  .meta({ id: 'JobSummary' });
export type JobSummary = z.output<typeof jobSummary>;

export const goneJob = job
  .pick({ id: true, kind: true })
  .extend({
    status: z.enum([...FINAL_STATUSES, 'deleted']),
    finishedAt: timestamp,
    gone: z
      .literal(true)
      .meta({ description: 'Its row is gone (its kind keeps no history): only how it ended is left.' }),
  })
  .meta({ id: 'GoneJob' });
export type GoneJob = z.output<typeof goneJob>;

export const cancelAnswer = z
  .object({
    id: jobId,
    status: z.enum(['cancelled', 'running']).meta({
      description:
        'cancelled (200): it never ran, or already ended so. running (202): its handler is being stopped; it ends ' +
        'cancelled.',
    }),
    cancelRequested: z.literal(true),
  })
  .meta({ id: 'CancelAnswer' });
export type CancelAnswer = z.output<typeof cancelAnswer>;

export const jobPage = z
  .object({
    jobs: z.array(jobSummary),
    nextCursor: jobId.nullable().meta({ description: 'Pass as cursor for the next page; null on the last.' }),
  })
  .meta({ id: 'JobPage' });
export type JobPage = z.output<typeof jobPage>;

export const kindStats = z
  .object({
    pending: z.int().min(0),
    ready: z.int().min(0).meta({ description: 'Pending and due now.' }),
    delayed: z.int().min(0).meta({ description: 'Pending with a future run_at (a delay or a backoff).' }),
    running: z.int().min(0),
    dead: z.int().min(0),
    waiting: z.int().min(0).meta({
      description:
        'Waiting for other jobs to complete (after), or workflow runs waiting on a step (a sleep, an event, a child).',
    }),
    oldestReadySeconds: z.number().min(0).nullable(),
    paused: z.boolean(),
    held: z
      .int()
      .min(0)
      .meta({
        description:
          'Workflow runs held because the code departs from their history (among waiting): a deploy that fits, ' +
          'a retry from a step or a cancel ends it.',
      }),
    versions: z
      .record(z.string(), z.int().min(0))
      .optional()
      .meta({
        description:
          'A kind with versions: its live jobs (pending, running, waiting, dead) by the version they run on. A ' +
          'version no drainer has keeps its runs pending; a version not listed has no live job left and may be ' +
          'deleted.',
      }),
    limits: z
      .object({
        globalConcurrency: z.object({ limit: z.int().min(1), running: z.int().min(0) }).optional(),
        groupConcurrency: z
          .object({
            limit: z.int().min(1),
            keysWaiting: z.int().min(0).meta({ description: 'Group keys with jobs ready to run.' }),
          })
          .optional(),
        rateLimit: z
          .object({
            limit: z.int().min(1),
            periodSeconds: z.number().positive(),
            perGroup: z.boolean(),
            startsInWindow: z.int().min(0).meta({ description: 'Starts in the current window, all keys together.' }),
          })
          .optional(),
        fair: z.literal(true).optional().meta({ description: 'fair: true — claims take turns across group keys.' }),
        groupOverrides: z
          .object({
            count: z.int().min(0),
            keys: z
              .array(z.lazy(() => groupLimitsAnswer.omit({ kind: true })))
              .meta({ description: 'The first 100, by key.' }),
          })
          .optional()
          .meta({ description: 'Group keys with limits of their own (PUT /kinds/:kind/groups/:groupKey/limits).' }),
      })
      .optional()
      .meta({
        description:
          "The kind's limits across every drainer and how much of them is in use (kinds limited in this drainer's " +
          'code).',
      }),
  })
  .meta({ id: 'KindStats' });

const groupRate = z.strictObject({
  limit: z.int().min(1).max(1_000_000),
  periodSeconds: z
    .number()
    .min(MIN_RATE_PERIOD_SECONDS, `must be from ${MIN_RATE_PERIOD_SECONDS} to ${MAX_RATE_PERIOD_SECONDS} seconds`)
    .max(MAX_RATE_PERIOD_SECONDS, `must be from ${MIN_RATE_PERIOD_SECONDS} to ${MAX_RATE_PERIOD_SECONDS} seconds`),
});

export const groupLimitsInput = z
  .strictObject({
    concurrency: z
      .int()
      .min(1)
      .max(100_000)
      .optional()
      .meta({ description: "Most jobs of this key running at once (instead of the kind's groupConcurrency)." }),
    rateLimit: groupRate.optional().meta({
      description: "Most starts of this key per rolling window (instead of the kind's per-group rate limit).",
    }),
  })
  .refine(
    (v) => v.concurrency !== undefined || v.rateLimit !== undefined,
    "give concurrency, rateLimit or both (DELETE removes the key's limits)",
  )
  .meta({ id: 'GroupLimitsInput' });
export type GroupLimitsInput = z.input<typeof groupLimitsInput>;

export const groupLimitsAnswer = z
  .object({
    kind: z.string(),
    groupKey: z.string(),
    concurrency: z.int().nullable(),
    rateLimit: groupRate.nullable(),
  })
  .meta({ id: 'GroupLimits' });
export type GroupLimitsAnswer = z.output<typeof groupLimitsAnswer>;

export const groupLimitsRemoved = z.object({
  kind: z.string(),
  groupKey: z.string(),
  removed: z.boolean().meta({ description: 'false: it had none.' }),
});
export type GroupLimitsRemoved = z.output<typeof groupLimitsRemoved>;

export const groupKeyParam = z.strictObject({
  kind: z.string().meta({ description: 'A job kind.', example: 'sync-account' }),
  groupKey: z.string().meta({ description: 'A group key (1 to 200 characters).', example: 'tenant:acme' }),
});

export const subscriptionStats = z
  .object({
    event: z.string(),
    kind: z.string(),
    subscribedAt: timestamp,
  })
  .meta({ description: 'A kind subscribed to an event (on): each event of that name enqueues one job of it.' });

export const queueStats = z
  .object({
    kinds: z.record(z.string(), kindStats),
    oldestReadySeconds: z.number().min(0).nullable(),
    subscriptions: z
      .array(subscriptionStats)
      .optional()
      .meta({ description: 'Kinds subscribed to events, by event then kind (docs/events.md).' }),
  })
  .meta({ id: 'QueueStats' });
export type QueueStats = z.output<typeof queueStats>;

export const deadRetried = z.object({
  retried: z.int().min(0),
  done: z.boolean().meta({ description: 'false: more remain, send it again.' }),
});
export type DeadRetried = z.output<typeof deadRetried>;
export const deadDeleted = z.object({
  deleted: z.int().min(0),
  done: z.boolean().meta({ description: 'false: more remain, send it again.' }),
});
export type DeadDeleted = z.output<typeof deadDeleted>;

export const kindPaused = z.object({ kind: z.string(), paused: z.boolean() });
export type KindPaused = z.output<typeof kindPaused>;

export const scheduleList = z.object({
  schedules: z.array(
    z.object({
      name: z.string(),
      cron: z.string(),
      timezone: z.string(),
      kind: z.string(),
      nextRunAt: timestamp.nullable(),
      lastRunAt: timestamp.nullable().meta({ description: 'The last slot a job was enqueued for; null: never.' }),
    }),
  ),
});
export type ScheduleList = z.output<typeof scheduleList>;

export const kindList = z
  .object({
    kinds: z.array(
      z.object({
        kind: z.string(),
        version: z
          .int()
          .min(1)
          .meta({ description: 'The highest version its writer registered: new jobs start on it.' }),
        options: z.record(z.string(), z.unknown()).meta({
          description:
            'Every option the definition sets (maxAttempts, priority, keepCompletedSeconds, backoff, timeoutMs, …). ' +
            "A job enqueued by the kind's name alone (pgdrain.enqueue() in SQL, enqueue() by name) gets its " +
            'maxAttempts, priority, visibilityTimeoutSeconds, keepCompletedSeconds and version, as a typed one does.',
          example: { maxAttempts: 5, keepCompletedSeconds: 86400 },
        }),
        writtenBy: z.string().meta({ description: 'The drainer that wrote it (the newest start wins).' }),
        writtenAt: timestamp,
        registeredHere: z.boolean().meta({ description: 'Whether the drainer answering has the kind.' }),
      }),
    ),
  })
  .meta({ id: 'KindList' });
export type KindList = z.output<typeof kindList>;

export const throughput = z.object({
  minutes: z.array(
    z.object({ minute: timestamp, completed: z.int().min(0), failed: z.int().min(0), dead: z.int().min(0) }),
  ),
});
export type Throughput = z.output<typeof throughput>;

export const health = z.union([
  z.object({ ok: z.literal(true) }),
  z.object({ ok: z.literal(false), error: apiErrorBody.shape.error }),
]);
export type Health = z.output<typeof health>;
