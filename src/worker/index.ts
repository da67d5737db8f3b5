// The Worker's entry (wrangler.toml `main`): the HTTP API and the cron drainer with the built-in
// job kinds. A Workers entry module may export only handlers; the machinery is in create-worker.ts.
import { createWorker } from './create-worker.ts';

export default createWorker();
