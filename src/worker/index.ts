// The Worker's entry (wrangler.toml `main`): the HTTP API, the cron drainer and the queue's clock
// with the built-in job kinds. A Workers entry module exports its handlers and its Durable Object
// classes; the machinery is in create-worker.ts.
import { createWorker } from './create-worker.ts';

const queue = createWorker();
export default queue;
/** The queue's clock (wrangler.toml binds it as PGDRAIN_CLOCK). */
export const QueueClock = queue.QueueClock;
