// README quick start on Cloudflare Workers: the Worker with your kinds (its `fetch` is the HTTP API,
// its `scheduled` the cron drainer). Loaded by test/readme-examples.test.ts.
// In your app: import { createWorker } from 'pgdrain/worker';
import { createWorker } from '../src/entry/worker.ts';
import { sendReceipt } from './quick-start.ts';

export default createWorker({ jobs: [sendReceipt] });   // the HTTP API, and a cron drainer as `scheduled`
