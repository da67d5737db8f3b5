// The claim planner's rule for kinds limited across drainers (src/drain/claim-planner.ts): a claim
// the limits held back waits for a slot — unless one of the drain's own jobs of that kind was
// settled in the database while the claim was on its way (its snapshot may predate that), in
// which case it claims again at once. Without that, a kind of many groups one at a time each
// waited a second per round (50k jobs of 100 groups: 312 jobs/s instead of about 2,000).
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BLOCKED_RECHECK_MS, ClaimPlanner } from '../src/drain/claim-planner.ts';
import { JobBook } from '../src/drain/job-record.ts';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';

const grouped = defineJob({ kind: 'grouped', schema: z.unknown(), handler: () => {}, groupConcurrency: 1 });

function planner() {
  const book = new JobBook();
  const plan = new ClaimPlanner(new JobRegistry([grouped]), book, {
    kinds: ['grouped'], batchSize: 250, maxBatchSize: 250, concurrency: 250, prefetch: 0, claimsInFlight: 2, carryCompletions: false,
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
