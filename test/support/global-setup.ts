// Starts the run's PostgreSQL (shared with the Worker tests: postgres-server.ts) for the Node
// project; each test file then creates its own database on it, a copy of the migrated template
// (see database.ts).
import type { TestProject } from 'vitest/node';
import { startTestServer } from './postgres-server.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startTestServer();
  project.provide('adminDatabaseUrl', server.adminUrl);
  project.provide('templateDatabase', server.template);
  return server.stop;
}
