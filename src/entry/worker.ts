// `pgdrain/worker`: the Cloudflare Worker drainer on Neon's serverless driver.
//   const queue = createWorker({ jobs: [sendReceipt] });
//   app.route('/queue', queue.app);
//   export default { fetch: app.fetch, scheduled: queue.scheduled };
export {
  createWorker, DEFAULT_BUDGET_MS, type WorkerOptions,
  type Env as WorkerEnv, type ScheduledReport, type ScheduledControllerLike,
} from '../worker/create-worker.ts';
