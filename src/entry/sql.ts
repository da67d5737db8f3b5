// `pgdrain/sql`: the schema `pgdrain` as Drizzle tables, for your own queries (what is pending, what
// died) and for drizzle-kit (`schemaFilter: ['public']` keeps them out of your migrations), with
// the constants that go with them. Read them freely; write to them through pgdrain's functions
// (enqueue, cancel, retry…) or its SQL functions (pgdrain.enqueue(), pgdrain.send_event()…), which
// keep the queue's invariants.
export {
  jobs,
  jobCounts,
  jobTotals,
  pausedKinds,
  schedules,
  jobDependencies,
  finishedJobs,
  workflowSteps,
  workflowEvents,
  groupLimits,
  pgdrainSchema,
  PGDRAIN_SCHEMA,
  JOB_STATUSES,
  FINAL_STATUSES,
  type JobRow,
  type JobStatus,
} from '../db/schema.ts';
export { NOTIFY_CHANNEL } from '../queries/index.ts';
