// `pgdrain/client`: a typed client for the HTTP API (Node, Workers, browsers); no runtime dependencies.
export { createClient, PgdrainApiError, type ClientOptions, type PgdrainClient } from '../client/index.ts';
export { PgdrainError } from '../errors.ts';
export type {
  BatchEnqueued,
  DeadDeleted,
  DeadRetried,
  Enqueued,
  Health,
  Job,
  JobInput,
  JobPage,
  KindPaused,
  ListQuery,
  QueueStats,
  ScheduleList,
  Throughput,
  ThroughputQuery,
} from '../client/index.ts';
