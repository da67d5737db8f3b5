// docs/workflows.md (Testing a workflow): the onboarding example (examples/workflow.ts) run to its
// end inside a test, in a second: its day-long sleep skipped, the event sent while it waits, the
// account call stubbed, the receipt child run in the same process.
// In your app: import { testWorkflow } from 'pgdrain/testing';
import { testWorkflow } from '../src/entry/testing.ts';
import type { Db } from '../src/entry/index.ts';
import { onboarding, sendReceipt } from './workflow.ts';

export async function onboardingInATest(db: Db, userId: number) {
  const run = await testWorkflow(onboarding, { userId }, {
    db,
    jobs: [sendReceipt],                                          // children run in the same drains
    events: [{ event: 'email.verified', key: `user:${userId}`, payload: { at: '2026-12-01' } }],
    steps: { 'create-account': { accountId: 'acct-test' } },     // a stub instead of the call
  });
  // run.status: 'completed'; run.result: what the run returned; run.steps: each step's record;
  // run.skippedMs: how far the virtual clock went (a day, then the wait).
  return run;
}
