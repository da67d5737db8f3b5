// Every SQL statement of the queue lives in this folder, one verb per file. Each function takes a
// Drizzle database or transaction, so the Worker (neon-serverless), the sidecar (node-postgres)
// and the tests run identical SQL, and enqueue joins whatever transaction the caller has open.
export { type Db, NOTIFY_CHANNEL, FINISHED_CHANNEL, CANCEL_CHANNEL, rowsOf, stopNamingStatements } from './db.ts';
export {
  enqueue,
  enqueueMany,
  ENQUEUE_CHUNK,
  UnknownDependencyError,
  type NewJob,
  type EnqueuedJob,
  type DedupeMode,
} from './enqueue/index.ts';
export {
  claim,
  claimReportingNextDue,
  claimStatement,
  explainClaim,
  compareIds,
  type ClaimedBatch,
  type ClaimedJob,
  type ClaimOptions,
} from './claim.ts';
export {
  claimLimited,
  explainLimitedClaim,
  type ClaimLimits,
  type LimitedClaim,
  type LimitedClaimOptions,
} from './claim-limited.ts';
export {
  complete,
  completeJobs,
  completeFollowed,
  type CompletedJob,
  type CompletionReport,
  type EndedJob,
  type HeldJob,
  type SettleOptions,
} from './complete.ts';
export { completeAndClaim, type CompleteAndClaimResult } from './complete-and-claim.ts';
export {
  fail,
  failMany,
  failJobs,
  MAX_ERROR_LENGTH,
  type Backoff,
  type Failure,
  type FailOptions,
  type FailOutcome,
} from './fail.ts';
export { release } from './release.ts';
export { renew, renewLeases, type HeldLease, type RenewedLease } from './renew.ts';
export { reap, type ReapOptions, type ReapResult } from './reap.ts';
export {
  type DrainerLease,
  drainerIdentityHolder,
  releaseDrainerIdentity,
  renewDrainerIdentity,
  takeDrainerIdentity,
} from './drainer-identity.ts';
export {
  countsByMinute,
  countTotals,
  rollUpCounts,
  COUNTS_RETENTION_HOURS,
  type MinuteCounts,
  type KindTotals,
} from './counts.ts';
export {
  getJob,
  getFinishedJob,
  watchJob,
  getDependencies,
  getJobLinks,
  listJobs,
  stats,
  emptyKindStats,
  retryDead,
  retryFromStep,
  retry,
  type RetryFromStepOutcome,
  deleteJob,
  ping,
  isJobId,
  type Job,
  type JobSummary,
  SUMMARY_PAYLOAD_BYTES,
  type ListOptions,
  type QueueStats,
  type KindStats,
  type RetryOutcome,
  type DeleteOutcome,
} from './inspect.ts';
export { pauseKind, resumeKind, listPausedKinds, kindInQueue } from './pause.ts';
export { retryDeadJobs, deleteDeadJobs, DEAD_BATCH, type BulkOptions, type BulkResult } from './dead-bulk.ts';
export { lockScheduleState, advanceSchedule, listScheduleStates, type ScheduleState } from './schedules.ts';
export {
  mayVacuumQueueTable,
  queueTableBeforeVacuum,
  tableHealth,
  type TableHealth,
  vacuumQueueTable,
} from './table-health.ts';
export { limitUsage, type LimitUsage } from './limit-usage.ts';
export { cancel, type CancelOutcome } from './cancel.ts';
export { pruneFinished, PRUNE_BATCH, type PruneResult } from './prune.ts';
export { maintainHistory, type HistoryUpkeep } from './job-history.ts';
export { housekeepingDueAt } from './housekeeping-due.ts';
export {
  loadSteps,
  loadStepsOfAttempts,
  recordStepCompleted,
  recordStepsCompleted,
  type CompletedStep,
  recordStepFailed,
  parkSleep,
  waitForEvent,
  parkOnChild,
  parkSteps,
  snoozeRun,
  holdRun,
  releaseHeldRuns,
  replayParkedRuns,
  type StepType,
  skipRunAhead,
  registerCancelTriggers,
  type CancelTrigger,
  sendEvent,
  type HeldRun,
  type NotHeld,
  type StoredStep,
  type StepStatus,
  type StepRecord,
  type EventWait,
  type ParkOutcome,
  type StepPark,
  type FailedTry,
  type StepParksOutcome,
  type SentEvent,
  runsInFlight,
  type RunInFlight,
} from './workflows.ts';
export { commitDurably } from './durable-commit.ts';
export { writeGroupLimits, deleteGroupLimits, listGroupLimits, type GroupLimitsRow } from './group-limits.ts';
export {
  writeSubscriptions,
  writeDeadLetterRoutes,
  type DeadLetterRoute,
  listSubscriptions,
  deleteSubscription,
  startedByOf,
  type Subscription,
  type SubscriptionRow,
} from './subscriptions.ts';
export { deadLetterOf } from './dead-letter.ts';
export { writeKinds, listKinds, type KindRow, type StoredKind } from './kinds.ts';
