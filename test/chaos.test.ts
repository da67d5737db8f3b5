// The chaos suite's short run (test/chaos/chaos.ts): three sidecars (with different visibility
// timeouts) and a Worker under kill -9, a SIGTERM with handlers that ignore their signal, a
// PostgreSQL restart and dropped connections; nothing lost, duplicates only where a fault hit.
import { expect, it } from 'vitest';
import { SHORT_CHAOS, runChaos } from './chaos/chaos.ts';

it('several sidecars and Worker invocations drain one database through kills, a graceful stop, a database restart and dropped connections: nothing lost', async () => {
  const report = await runChaos({ ...SHORT_CHAOS, log: (line) => console.log(line) });
  console.log(`chaos (short): ${JSON.stringify(report)}`);
  expect(report.lost).toEqual([]);
  expect(report.duplicatedOutsideFaults).toEqual([]);
  expect(report.leftRunning).toBe(0);
  expect(report.leftPending).toBe(0);
  expect(report.completed + report.dead).toBe(report.jobs);
  expect(report.dead).toBeGreaterThanOrEqual(Math.floor(report.jobs / 50)); // the doomed ones, at least
  expect(report.countersMatch).toBe(true);
  expect(report.kills).toBeGreaterThanOrEqual(2);
  expect(report.sigterms).toBeGreaterThanOrEqual(1);
  expect(report.drops).toBeGreaterThanOrEqual(2);
  expect(report.postgresRestarts).toBe(1);
  expect(report.workerInvocations).toBeGreaterThan(0);
  expect(report.finishedBy.sidecar).toBeGreaterThan(0);
  expect(report.finishedBy.worker).toBeGreaterThan(0);
}, 240_000);
