// The same queue-behaviour suite as test/queue.node-postgres.test.ts, on the Worker's driver
// (neon-serverless over a WebSocket) inside workerd. Smaller load: every statement crosses the proxy.
import { env } from 'cloudflare:test';
import { flowControlSuite } from '../conformance/flow-control.ts';
import { jobLifecycleSuite } from '../conformance/job-lifecycle.ts';
import { workflowSuite } from '../conformance/workflows.ts';
import { kindDoorsSuite } from '../conformance/kind-doors.ts';
import { workflowChangeSuite } from '../conformance/workflow-changes.ts';
import { queueBehaviourSuite } from '../conformance/queue-behaviour.ts';
import { createNeonHarness } from './neon-harness.ts';

queueBehaviourSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL), {
  drainJobs: 1_000,
  historyRows: 100_000,
});

flowControlSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL));

jobLifecycleSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL), {
  fanIn: 1_000,
});

workflowSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL));

workflowChangeSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL));

kindDoorsSuite('neon-serverless in workerd', () => createNeonHarness(env.CONFORMANCE_DATABASE_URL));
