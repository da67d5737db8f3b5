// The queue-behaviour, flow-control, job-lifecycle and workflow suites on node-postgres (the sidecar's driver) against a real PostgreSQL.
import pg from 'pg';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { claim, enqueueMany, pauseKind } from '../src/queries/index.ts';
import { openPools } from '../src/sidecar/database.ts';
import { Incidents } from '../src/sidecar/incidents.ts';
import { createTestDatabase } from './support/database.ts';
import { flowControlSuite } from './conformance/flow-control.ts';
import { jobLifecycleSuite } from './conformance/job-lifecycle.ts';
import { type Harness, listenOn, queueBehaviourSuite } from './conformance/queue-behaviour.ts';
import { workflowSuite } from './conformance/workflows.ts';

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
workflowSuite('node-postgres', nodePostgresHarness);


// The sidecar's drainer sends its claims as a prepared statement (src/queries/claim.ts,
// preparedClaim) instead of calling pgdrain.claim(): the two must pick and write the same jobs.
describe('prepared claims (the sidecar drain pool)', () => {
  it('claim the same jobs, in the same order, with the same lease, as pgdrain.claim()', async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 2, new Incidents(pino({ level: 'silent' })));
    try {
      const jobs = [
        ...Array.from({ length: 8 }, (_, i) => ({ kind: 'a', payload: { i }, priority: i % 3 })),
        ...Array.from({ length: 4 }, (_, i) => ({ kind: 'b', payload: { i }, visibilityTimeoutSeconds: 90 })),
        { kind: 'a', payload: { later: true }, runAt: new Date(Date.now() + 60_000) },
        { kind: 'held', payload: {} },
      ];
      await enqueueMany(database.db, jobs);
      await pauseKind(database.db, 'held');
      const reset = () => t.query(`UPDATE pgdrain.jobs SET status = 'pending', attempts = 0, locked_by = NULL, locked_at = NULL, locked_until = NULL`);
      const cases = [{ batchSize: 5 }, { batchSize: 20 }, { batchSize: 3, kinds: ['b'] }, { batchSize: 20, kinds: ['a', 'held'] }];
      for (const options of cases) {
        const seen = [];
        for (const prepared of [false, true]) {
          await reset();
          const claimed = await claim(database.drainDb, { ...options, lockToken: 'same', visibilityTimeoutSeconds: 30, prepared });
          const leases = await t.query(`SELECT id::text, extract(epoch FROM locked_until - locked_at)::int AS lease FROM pgdrain.jobs WHERE status = 'running' ORDER BY id`);
          seen.push({ claimed: claimed.map(({ id, kind, payload, attempts, priority, lockedBy }) => ({ id, kind, payload, attempts, priority, lockedBy })), leases });
        }
        expect(seen[0]!.claimed.length).toBeGreaterThan(0);
        expect(seen[1], JSON.stringify(options)).toEqual(seen[0]);
      }
      // Neither claims the paused kind or the job not yet due.
      await reset();
      const all = await claim(database.drainDb, { batchSize: 100, lockToken: 'x', prepared: true });
      expect(all.map((j) => j.kind).sort()).toEqual([...Array(8).fill('a'), ...Array(4).fill('b')]);
    } finally {
      await database.close();
      await t.close();
    }
  });
});
