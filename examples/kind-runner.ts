// A kind with a runner of its own (KindRunner): it waits for an export a third party builds,
// looking every few seconds, without spending an attempt per look — each look that finds it not
// ready snoozes the job until the next one, as a workflow's sleep does.
// In your app: import { defineJob } from 'pgdrain';
import { z } from 'zod';
import { defineJob } from '../src/entry/index.ts';

/** The third party: an export is ready after `looks` looks (a stand-in for its HTTP API). */
export const exports = new Map<string, { looks: number; url: string }>();

export const awaitExport = defineJob({
  kind: 'await_export',
  schema: z.object({ exportId: z.string() }),
  maxAttempts: 3,
  keepCompletedSeconds: 3600, // the url, for GET /jobs/:id
  handler: () => {
    throw new Error('await_export runs through its runner');
  },
  runner: {
    attempt: async ({ exportId }, _ctx, runtime) => {
      const job = exports.get(exportId);
      if (job && --job.looks <= 0) return { completed: { url: job.url } };
      return runtime.snooze(new Date(Date.now() + 50)); // not ready: look again soon, no attempt spent
    },
  },
});
