// The claim planner's rule for kinds limited across drainers (src/drain/claim-planner.ts): a claim
// the limits held back waits for a slot — unless one of the drain's own jobs of that kind was
// settled in the database while the claim was on its way (its snapshot may predate that), in
// which case it claims again at once. Without that, a kind of many groups one at a time each
// waited a second per round (50k jobs of 100 groups: 312 jobs/s instead of about 2,000).
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BLOCKED_RECHECK_MS, ClaimPlanner } from '../../src/drain/claim-planner.ts';
import { JobBook } from '../../src/drain/job-record.ts';
import { JobRegistry, defineJob } from '../../src/jobs/index.ts';

const grouped = defineJob({ kind: 'grouped', schema: z.unknown(), handler: () => {}, groupConcurrency: 1 });

function planner() {
  const book = new JobBook();
  const plan = new ClaimPlanner(new JobRegistry([grouped]), book, {
    kinds: ['grouped'],
    batchSize: 250,
    maxBatchSize: 250,
    concurrency: 250,
    prefetch: 0,
    claimsInFlight: 2,
    carryCompletions: false,
  });
  return plan;
}

describe('the claim planner, for a kind limited across drainers', () => {
  it('a claim held back while none of its slots was freed waits for the recheck', () => {
    const plan = planner();
    const claim = plan.next()!;
    expect(claim).toMatchObject({ kinds: ['grouped'], limits: { groupConcurrency: 1 } });
    plan.claimReturned(claim, { jobs: [], heldBack: true }, 1);
    expect(plan.next()).toBeNull();
    expect(plan.nextUnblockAt).toBeGreaterThan(Date.now() + BLOCKED_RECHECK_MS / 2);
  });

  it('a claim held back while one of its slots was freed claims again at once', () => {
    const plan = planner();
    const claim = plan.next()!;
    plan.slotFreed('grouped'); // a settlement returned while the claim was on its way
    plan.claimReturned(claim, { jobs: [], heldBack: true }, 1);
    expect(plan.next()).toMatchObject({ kinds: ['grouped'] });
  });

  it('a settlement after the claim held back unblocks it too', () => {
    const plan = planner();
    plan.claimReturned(plan.next()!, { jobs: [], heldBack: true }, 1);
    expect(plan.next()).toBeNull();
    plan.slotFreed('grouped');
    expect(plan.next()).toMatchObject({ kinds: ['grouped'] });
  });
});

// A claim's snapshot may predate jobs that were announced while it was on its way (a NOTIFY, a
// settlement that made a parked workflow pending): its short answer must not hide them. Without
// this, a drain whose child job died while a claim was in flight ended with the woken parent
// still pending (the workflow conformance suite caught it under load), and a sidecar waited a
// whole poll interval for a job it had been told about.
describe('the claim planner, for jobs announced while a claim is on its way', () => {
  const plain = defineJob({ kind: 'plain', schema: z.unknown(), handler: () => {} });
  const plainPlanner = () =>
    new ClaimPlanner(new JobRegistry([plain]), new JobBook(), {
      kinds: ['plain'],
      batchSize: 10,
      maxBatchSize: 10,
      concurrency: 10,
      prefetch: 0,
      claimsInFlight: 2,
      carryCompletions: false,
    });

  it('a short claim drains the kind when nothing was announced meanwhile', () => {
    const plan = plainPlanner();
    plan.claimReturned(plan.next()!, { jobs: [], heldBack: false }, 1);
    expect(plan.exhausted).toBe(true);
    expect(plan.next()).toBeNull();
  });

  it('a reopen while the claim was in flight outlives its short answer: the kind is claimed again', () => {
    const plan = plainPlanner();
    const claim = plan.next()!;
    plan.reopen(['plain']); // the kind was not drained yet: the old code ignored this
    plan.claimReturned(claim, { jobs: [], heldBack: false }, 1);
    expect(plan.exhausted).toBe(false);
    const again = plan.next()!;
    expect(again).toMatchObject({ kinds: ['plain'] });
    // That claim's short answer, with nothing announced since, drains it.
    plan.claimReturned(again, { jobs: [], heldBack: false }, 1);
    expect(plan.exhausted).toBe(true);
  });

  it('a reopen for another kind does not keep this one open', () => {
    const plan = plainPlanner();
    const claim = plan.next()!;
    plan.reopen(['other']);
    plan.claimReturned(claim, { jobs: [], heldBack: false }, 1);
    expect(plan.exhausted).toBe(true);
  });
});
