// The HTTP API contract against the Worker itself: `npm run dev:worker` (wrangler dev, workerd) on
// both of its paths, Neon's driver through the WebSocket proxy and node-postgres through a local
// Hyperdrive binding, each on its own database.
import { CONTRACT_SETTINGS, type ApiTarget, httpApiContract } from './conformance/http-api-contract.ts';
import { createTestDatabase } from './support/database.ts';
import { startWorkerDev } from './support/worker-dev-process.ts';

const TOKEN = 'worker-dev-contract-token-0123';

async function workerTarget(hyperdrive: boolean): Promise<ApiTarget> {
  const t = await createTestDatabase();
  const worker = await startWorkerDev({
    databaseUrl: t.url,
    hyperdrive,
    env: {
      API_TOKEN: TOKEN,
      WEBHOOK_ALLOWED_HOSTS: CONTRACT_SETTINGS.webhookAllowedHosts,
      MAX_BODY_BYTES: String(CONTRACT_SETTINGS.maxBodyBytes),
      // The contract reads the rows its requests leave: no drain may run them meanwhile (with the
      // queue's clock, an enqueue wakes one). test/worker-dev-clock.test.ts has the clock.
      QUEUE_CLOCK: 'false',
    },
  }).catch(async (error) => {
    await t.close();
    throw error;
  });
  let seen = 0;
  return {
    request: (path, init) => fetch(`${worker.url}${path}`, init),
    t,
    token: TOKEN,
    loggedErrors: async () => {
      const lines = worker
        .output()
        .slice(seen)
        .split('\n')
        .filter((line) => line.includes('"event":"request_failed"'));
      seen = worker.output().length;
      return lines;
    },
    close: async () => {
      await worker.stop();
      await t.close();
    },
  };
}

httpApiContract('the Worker under wrangler dev, Neon path', () => workerTarget(false));
httpApiContract('the Worker under wrangler dev, Hyperdrive path', () => workerTarget(true));
