// Starts the run's PostgreSQL (shared with the Worker tests: postgres-server.ts) for the Node
// project; each test file then creates its own database on it, a copy of the migrated template
// (see database.ts). PGDRAIN_TEST_POOLER=pgbouncer puts a PgBouncer in transaction mode between
// the tests and the server (.ci/run runs the conformance suites and the HTTP contract so).
import type { TestProject } from 'vitest/node';
import { startPgBouncer } from './pgbouncer.ts';
import { startTestServer } from './postgres-server.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
    /** PGDRAIN_TEST_POOLER=pgbouncer: the port of a PgBouncer in transaction mode in front of the
     * server, which every test database's URL goes through (its databases are still created direct). */
    poolerPort: number | null;
  }
}

export default async function setup(project: TestProject) {
  const server = await startTestServer();
  project.provide('adminDatabaseUrl', server.adminUrl);
  project.provide('templateDatabase', server.template);
  const pooler = process.env.PGDRAIN_TEST_POOLER === 'pgbouncer' ? await startPgBouncer(server.adminUrl) : null;
  project.provide('poolerPort', pooler?.port ?? null);
  return async () => {
    await pooler?.stop();
    await server.stop();
  };
}
