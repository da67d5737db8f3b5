// The chaos suite's short run (test/chaos/chaos.ts): three sidecars (with different visibility
// timeouts) and a Worker under kill -9, a SIGTERM with handlers that ignore their signal, a
// PostgreSQL restart and dropped connections, carrying plain jobs, workflows (plain and
// transactional steps, sleeps, SQL-sent events, children), a fair kind with per-key overrides and a
// batch kind; the Worker runs with the queue's clock. Mid-run a deploy restarts one sidecar with a
// version 2 of the workflow, on which new runs start. Nothing lost, duplicates only where a fault
// hit, no key over its limit, every run completed with each transactional write once.
import { expect, it } from 'vitest';
import { SHORT_CHAOS, runChaos } from './chaos/chaos.ts';

it('several sidecars and Worker invocations drain one database through kills, a graceful stop, a database restart and dropped connections: nothing lost', async () => {
  const report = await runChaos({ ...SHORT_CHAOS, log: (line) => console.log(line) });
  console.log(`chaos (short): ${JSON.stringify(report)}`);
  expect(report.lost).toEqual([]);
  // Its details (each run, the faults near it, what the Worker logged of its drains) say why.
  expect(report.duplicateDetails).toEqual([]);
  expect(report.leftRunning).toBe(0);
  expect(report.leftPending).toBe(0);
  expect(report.leftWaiting).toBe(0);
  expect(report.stuckAtStop).toEqual([]);
  expect(report.flowsNotCompleted).toEqual([]);
  expect(report.transactionalWritesNotOnce).toEqual([]);
  expect(report.plainStepsRepeatedOutsideFaults).toEqual([]);
  expect(report.limitsExceeded).toEqual([]);
  expect(report.flows.runs).toBeGreaterThan(0);
  expect(report.flows.completed).toBe(report.flows.runs);
  expect(report.flows.childrenCompleted).toBe(report.flows.runs);
  expect(report.batch.completed + report.batch.dead).toBe(report.batch.items);
  expect(report.fair.spans).toBeGreaterThan(0);
  expect(report.completed + report.dead).toBe(report.jobs);
  expect(report.doomed).toBeGreaterThan(0);
  expect(report.dead).toBeGreaterThanOrEqual(report.doomed); // the doomed ones, at least
  expect(report.countersMatch).toBe(true);
  expect(report.kills).toBeGreaterThanOrEqual(2);
  expect(report.sigterms).toBeGreaterThanOrEqual(1);
  // The deploy mid-run: runs started on version 2 completed on it, the others on version 1.
  expect(report.deploys).toBe(1);
  expect(report.flows.onVersion2).toBeGreaterThan(0);
  expect(report.drops).toBeGreaterThanOrEqual(2);
  expect(report.postgresRestarts).toBe(1);
  expect(report.workerInvocations).toBeGreaterThan(0);
  expect(report.finishedBy.sidecar).toBeGreaterThan(0);
  expect((report.finishedBy.worker ?? 0) + (report.finishedBy['worker-alarm'] ?? 0)).toBeGreaterThan(0);
}, 240_000);
