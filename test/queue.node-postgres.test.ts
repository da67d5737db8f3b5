// The queue-behaviour, flow-control and job-lifecycle suites on node-postgres (the sidecar's driver) against a real PostgreSQL.
import pg from 'pg';
import pino from 'pino';
import { openPools } from '../src/sidecar/database.ts';
import { Incidents } from '../src/sidecar/incidents.ts';
import { createTestDatabase } from './support/database.ts';
import { flowControlSuite } from './conformance/flow-control.ts';
import { jobLifecycleSuite } from './conformance/job-lifecycle.ts';
import { type Harness, listenOn, queueBehaviourSuite } from './conformance/queue-behaviour.ts';

// The sidecar's own pools (src/sidecar/database.ts), as `pgdrain start` opens them.
const nodePostgresHarness = async (): Promise<Harness> => {
  const t = await createTestDatabase();
  const database = openPools(t.url, 10, new Incidents(pino({ level: 'silent' })));
  return {
    db: database.db,
    query: t.query as Harness['query'],
    connect: async () => t.connect(2).db,
    listen: async (channel) => {
      const client = new pg.Client({ connectionString: t.url });
      await client.connect();
      return listenOn(client, channel);
    },
    transactions: database.transactions,
    close: async () => {
      await database.close();
      await t.close();
    },
  };
};

queueBehaviourSuite('node-postgres', nodePostgresHarness, { drainJobs: 5_000, historyRows: 100_000 });
flowControlSuite('node-postgres', nodePostgresHarness);
jobLifecycleSuite('node-postgres', nodePostgresHarness, { fanIn: 10_000 });

