// The queue's housekeeping round, the same on both runtimes (the sidecar's reaper on a timer, the
// Worker's cron invocations beside their drain): leases that ran out go back to pending (or dead,
// when that was their last attempt), old per-minute counts are folded into the totals, and kept
// jobs whose time is up are pruned. Three statements, each idempotent and cheap.
import { type Db, type PruneResult, type ReapResult, pruneFinished, reap, rollUpCounts } from '../queries/index.ts';

export interface HousekeepingRound {
  reaped: ReapResult;
  pruned: PruneResult;
}

/** One round. `visibilityTimeoutSeconds` applies only to jobs locked without a lease end (older drainers). */
export async function housekeep(db: Db, visibilityTimeoutSeconds: number): Promise<HousekeepingRound> {
  const reaped = await reap(db, visibilityTimeoutSeconds);
  await rollUpCounts(db);
  const pruned = await pruneFinished(db);
  return { reaped, pruned };
}
