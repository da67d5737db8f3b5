// For the tests that run inside workerd: the run's PostgreSQL (postgres-server.ts), one migrated
// database per Worker test file, and the WebSocket proxy the Neon driver needs to reach a plain
// PostgreSQL.
import type { TestProject } from 'vitest/node';
import { startWsProxy } from '../../src/dev/ws-proxy.ts';
import { createDatabase, startTestServer } from './postgres-server.ts';

export const WORKER_DATABASES = [
  'conformance',
  'scheduled',
  'api',
  'hostile',
  'client',
  'tracing',
  'hyperdrive_conformance',
  'hyperdrive_scheduled',
  'hyperdrive_tracing',
  'clock',
  'schedule_clock',
] as const;

declare module 'vitest' {
  export interface ProvidedContext {
    workerDatabaseUrls: string;
    wsProxyAddress: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startTestServer();
  const urls: Record<string, string> = {};
  for (const name of WORKER_DATABASES)
    urls[name] = await createDatabase(server.adminUrl, `pgdrain_worker_${name}_${process.pid}`, server.template);
  const target = new URL(server.adminUrl);
  const proxy = await startWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) } });
  project.provide('workerDatabaseUrls', JSON.stringify(urls));
  project.provide('wsProxyAddress', proxy.address);
  return async () => {
    await proxy.close();
    await server.stop();
  };
}
