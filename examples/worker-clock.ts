// The Worker with the queue's clock (docs/workers.md): the same createWorker, and its Durable Object
// class exported next to it, for wrangler.toml's PGDRAIN_CLOCK binding. Loaded by
// test/readme-examples.test.ts; the clock itself runs in workerd in test/workers/clock.test.ts.
// In your app: import { createWorker } from 'pgdrain/worker';
import { createWorker } from '../src/entry/worker.ts';
import { sendReceipt } from './quick-start.ts';

const queue = createWorker({ jobs: [sendReceipt] });
export default queue;
export const QueueClock = queue.QueueClock;   // the queue's clock, bound as PGDRAIN_CLOCK
