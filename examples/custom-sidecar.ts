// README example: the sidecar as a library, with a job kind of your own.
import { z } from 'zod';
// In your app: import { defineJob } from 'pgdrain'; import { startSidecar } from 'pgdrain/sidecar';
import { defineJob } from '../src/entry/index.ts';
import { startSidecar } from '../src/entry/sidecar.ts';

export const sendReceipt = defineJob({
  kind: 'send_receipt',
  schema: z.object({ orderId: z.number().int() }),
  maxAttempts: 5,
  timeoutMs: 10_000,
  handler: async ({ orderId }, { signal }) => {
    // Idempotent: a retry after a crash must not send a second receipt.
    await deliverReceiptOnce(orderId, signal);
  },
});

export const sent: number[] = [];
async function deliverReceiptOnce(orderId: number, _signal: AbortSignal) {
  if (!sent.includes(orderId)) sent.push(orderId);
}

export function startMySidecar(databaseUrl: string) {
  return startSidecar({ databaseUrl, jobs: [sendReceipt], port: 0, apiToken: process.env.API_TOKEN ?? 'change-me-to-a-long-secret' });
}
