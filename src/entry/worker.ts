// `pgdrain/worker`: the Cloudflare Worker drainer, through Hyperdrive (node-postgres) when the Worker
// has a HYPERDRIVE binding, else on Neon's serverless driver with DATABASE_URL.
//   const queue = createWorker({ jobs: [sendReceipt] });
//   app.route('/queue', queue.app);
//   export default { fetch: app.fetch, scheduled: queue.scheduled };
export {
  createWorker, DEFAULT_BUDGET_MS, type WorkerOptions,
  type Env as WorkerEnv, type ScheduledReport, type ScheduledControllerLike,
} from '../worker/create-worker.ts';
export type { HyperdriveBinding, WorkerDriver } from '../worker/database.ts';
