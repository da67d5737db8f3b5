// HTTP API page: the typed client (run by test/readme-examples.test.ts against a sidecar).
// In your app: import { createClient, PgdrainApiError } from 'pgdrain/client';
import { createClient, PgdrainApiError } from '../src/entry/client.ts';

export async function useTheClient(): Promise<{ id: string; status: string }> {
  const queue = createClient({ baseUrl: process.env.PGDRAIN_URL!, token: process.env.PGDRAIN_TOKEN });
  const { id } = await queue.enqueue({ kind: 'send_receipt', payload: { orderId: 17 }, delaySeconds: 60 });
  const job = await queue.getJob(id); // typed: job.status is 'pending' | 'running' | 'dead' | 'waiting' | 'completed' | 'cancelled'
  const done = await queue.waitFor(id, { timeoutSeconds: 2 }); // as soon as it is completed, dead or cancelled
  try { await queue.retryJob(id); } catch (e) { if (e instanceof PgdrainApiError) console.log(e.status, e.code); } // 409 not_dead
  return { id, status: done.status === job.status ? job.status : done.status };
}
