// `pgdrain/worker`: the Cloudflare Worker drainer, through Hyperdrive (node-postgres) when the Worker
// has a HYPERDRIVE binding, else on Neon's serverless driver with DATABASE_URL.
//   const queue = createWorker({ jobs: [sendReceipt] });
//   app.route('/queue', queue.app);
//   export default { fetch: app.fetch, scheduled: queue.scheduled };
//   export const QueueClock = queue.QueueClock;   // the queue's clock (docs/workers.md), bound as PGDRAIN_CLOCK
export {
  createWorker,
  DEFAULT_BUDGET_MS,
  type WorkerOptions,
  type Env as WorkerEnv,
  type ScheduledReport,
  type ScheduledControllerLike,
} from '../worker/create-worker.ts';
export type { HyperdriveBinding, WorkerDriver } from '../worker/database.ts';
export { tellQueueClock, type QueueClockApi, type ClockState } from '../worker/clock.ts';
