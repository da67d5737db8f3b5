// The same queue-behaviour suite as test/queue.node-postgres.test.ts, on the Worker's Hyperdrive path
// (node-postgres over Cloudflare sockets) inside workerd: the third driver next to node-postgres in
// Node and neon-serverless in workerd.
import { env } from 'cloudflare:test';
import { flowControlSuite } from '../conformance/flow-control.ts';
import { jobLifecycleSuite } from '../conformance/job-lifecycle.ts';
import { workflowSuite } from '../conformance/workflows.ts';
import { kindDoorsSuite } from '../conformance/kind-doors.ts';
import { workflowChangeSuite } from '../conformance/workflow-changes.ts';
import { queueBehaviourSuite } from '../conformance/queue-behaviour.ts';
import { createHyperdriveHarness } from './hyperdrive-harness.ts';

queueBehaviourSuite(
  'node-postgres through Hyperdrive in workerd',
  () => createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE),
  {
    drainJobs: 1_000,
    historyRows: 100_000,
  },
);

flowControlSuite('node-postgres through Hyperdrive in workerd', () =>
  createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE),
);

jobLifecycleSuite(
  'node-postgres through Hyperdrive in workerd',
  () => createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE),
  { fanIn: 1_000 },
);

workflowSuite('node-postgres through Hyperdrive in workerd', () => createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE));

workflowChangeSuite('node-postgres through Hyperdrive in workerd', () =>
  createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE),
);

kindDoorsSuite('node-postgres through Hyperdrive in workerd', () =>
  createHyperdriveHarness(env.HYPERDRIVE_CONFORMANCE),
);
