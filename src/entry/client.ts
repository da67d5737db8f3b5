// `pgdrain/client`: a typed client for the HTTP API (Node, Workers, browsers); no runtime dependencies.
export { createClient, PgdrainApiError, type ClientOptions, type PgdrainClient } from '../client/index.ts';
export { PgdrainError } from '../errors.ts';
// The request and response types, as the contract (src/http/contract.ts) defines them.
export type {
  BatchEnqueued,
  CancelAnswer,
  DeadDeleted,
  DeadRetried,
  Enqueued,
  EventInput,
  EventSent,
  GoneJob,
  GroupLimitsAnswer,
  GroupLimitsInput,
  GroupLimitsRemoved,
  Health,
  Job,
  JobInput,
  JobPage,
  KindPaused,
  ListQuery,
  QueueStats,
  RetryInput,
  ScheduleList,
  Throughput,
  ThroughputQuery,
  Unsubscribed,
  WorkflowStep,
} from '../http/contract.ts';
