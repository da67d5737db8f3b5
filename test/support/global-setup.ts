// Starts one real PostgreSQL for the Node project's run; each test file then creates its own fresh
// database on it (see database.ts).
import type { TestProject } from 'vitest/node';
import { startTestServer } from './postgres-server.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startTestServer();
  project.provide('adminDatabaseUrl', server.adminUrl);
  return server.stop;
}
