// The queue-behaviour, flow-control and job-lifecycle suites on node-postgres (the sidecar's driver) against a real PostgreSQL.
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Db } from '../src/queries/index.ts';
import { createTestDatabase } from './support/database.ts';
import { flowControlSuite } from './conformance/flow-control.ts';
import { jobLifecycleSuite } from './conformance/job-lifecycle.ts';
import { type Harness, listenOn, queueBehaviourSuite } from './conformance/queue-behaviour.ts';

const nodePostgresHarness = async (): Promise<Harness> => {
  const t = await createTestDatabase();
  return {
    db: t.db,
    query: t.query as Harness['query'],
    connect: async () => t.connect(2).db,
    listen: async (channel) => {
      const client = new pg.Client({ connectionString: t.url });
      await client.connect();
      return listenOn(client, channel);
    },
    transactions: async () => {
      const client = await t.pool.connect();
      return { db: drizzle({ client }) as unknown as Db, release: (destroy) => client.release(destroy) };
    },
    close: () => t.close(),
  };
};

queueBehaviourSuite('node-postgres', nodePostgresHarness, { drainJobs: 5_000, historyRows: 100_000 });
flowControlSuite('node-postgres', nodePostgresHarness);
jobLifecycleSuite('node-postgres', nodePostgresHarness, { fanIn: 10_000 });

