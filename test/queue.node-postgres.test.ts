// The queue-behaviour suite on node-postgres (the sidecar's driver) against a real PostgreSQL.
import pg from 'pg';
import { createTestDatabase } from './support/database.ts';
import { type Harness, listenOn, queueBehaviourSuite } from './conformance/queue-behaviour.ts';

queueBehaviourSuite(
  'node-postgres',
  async (): Promise<Harness> => {
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
      close: () => t.close(),
    };
  },
  { drainJobs: 5_000, historyRows: 100_000 },
);

