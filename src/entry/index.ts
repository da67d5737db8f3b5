// `pgdrain`: what an application imports to define job kinds, enqueue in its own transactions,
// inspect the queue and migrate its database. Runtime-neutral (Workers and Node) except
// `migrate`, which reads the migration files and so runs in Node. The drainers are in
// `pgdrain/sidecar` and `pgdrain/worker`, the HTTP API in `pgdrain/hono`, the tables in `pgdrain/sql`,
// a workflow's test harness in `pgdrain/testing`. test/unit/public-surface.test.ts holds the list.

// The base of every error class pgdrain defines: a stable `code` on each (docs/adopting.md).
export { PgdrainError } from '../errors.ts';

// Job kinds.
export {
  defineJob,
  PermanentJobError,
  RetryLaterError,
  JobRegistry,
  JobValidationError,
  type JobDefinition,
  type JobContext,
} from '../jobs/registry.ts';
export type { KindRunner, AttemptResult, AttemptRuntime } from '../jobs/definition.ts';
export { noopJob } from '../jobs/noop.ts';
export { createWebhookJob, type WebhookOptions } from '../jobs/webhook.ts';
export { createDefaultRegistry } from '../jobs/index.ts';

// Recurring schedules, passed next to the kinds to createWorker / startSidecar / the CLI's --jobs module.
export { defineSchedule, evaluateSchedules, type ScheduleDefinition, type ScheduleReport } from '../schedules.ts';

// Enqueue, in your Drizzle database or transaction.
export { enqueue, enqueueMany, type EnqueueOptions } from '../jobs/enqueue.ts';
export { UnknownDependencyError } from '../queries/index.ts';
export { NamedStatementsLost } from '../queries/db.ts';
export type { Db, NewJob, EnqueuedJob, ClaimedJob, Backoff } from '../queries/index.ts';

// Tracing: found by itself in Node once you register a tracer provider; pass the API in a Worker.
export { useOpenTelemetry, type OpenTelemetryApi } from '../open-telemetry.ts';

// A job's life: stop one, read what it waited for; the limits on what a handler reports.
export { cancel, getDependencies, type CancelOutcome } from '../queries/index.ts';
export { MAX_PROGRESS_BYTES, MAX_RESULT_BYTES, JobCancelledError, LeaseLostError } from '../drain/index.ts';
/** A job lost with its drainer this many times (kill -9 mid-attempt) is dead, saying so. */
export { MAX_LOST_ATTEMPTS } from '../db/constants.ts';

// Durable workflows: steps that run once, sleeps and waits that hold nothing, events in your transaction.
export {
  defineWorkflow,
  sendEvent,
  EventValidationError,
  StepTimeoutError,
  MAX_STEPS_PER_RUN,
  MAX_EVENT_PAYLOAD_BYTES,
  type Workflow,
  type WorkflowDefinition,
  type WorkflowStep,
  type StepContext,
  type StepOptions,
  type WaitForEventOptions,
  type WorkflowEvent,
} from '../workflows/index.ts';

// Batch kinds: many jobs per handler call, one outcome per job.
export {
  defineBatchJob,
  MAX_BATCH_SIZE,
  MAX_BATCH_WAIT_MS,
  type BatchJob,
  type BatchJobDefinition,
  type BatchItem,
  type BatchContext,
} from '../jobs/batch.ts';

// Events that start work: kinds subscribe with `on`; a retired kind's subscription is removed here.
export { unsubscribe } from '../jobs/subscriptions.ts';
export type { StartedBy } from '../jobs/definition.ts';

// Limits per group key, from data (a tenant's own concurrency and rate).
export { setGroupLimits, removeGroupLimits, type GroupLimits } from '../jobs/group-limits.ts';

// Inspect and repair.
export {
  getJob,
  listJobs,
  stats,
  retryDead,
  retry,
  deleteJob,
  countsByMinute,
  countTotals,
  retryDeadJobs,
  deleteDeadJobs,
  pauseKind,
  resumeKind,
  listPausedKinds,
  type BulkOptions,
  type BulkResult,
  type Job,
  type ListOptions,
  type QueueStats,
  type KindStats,
  type RetryOutcome,
  type DeleteOutcome,
  type MinuteCounts,
  type KindTotals,
} from '../queries/index.ts';

// The database's migrations. Its Drizzle tables, for your own queries and drizzle-kit, are in
// `pgdrain/sql`.
export { MigrationWaitError, migrateDatabase as migrate } from '../db/migrate.ts';
export type { JobStatus } from '../db/schema.ts';
