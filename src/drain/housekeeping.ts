// The queue's housekeeping round, the same on both runtimes (the sidecar's reaper on a timer, the
// Worker's cron invocations beside their drain): leases that ran out go back to pending (or dead,
// when that was their last attempt), old per-minute counts are folded into the totals, and kept
// jobs whose time is up are pruned, and the history's day partitions are made ahead and dropped
// when their day is over, and events past their retention pruned (in the prune's statement). Four
// statements, each idempotent and cheap.
import {
  type Db,
  type HistoryUpkeep,
  type PruneResult,
  type ReapResult,
  housekeepingDueAt,
  maintainHistory,
  pruneFinished,
  reap,
  rollUpCounts,
} from '../queries/index.ts';

export interface HousekeepingRound {
  reaped: ReapResult;
  pruned: PruneResult;
  history: HistoryUpkeep;
}

export interface HousekeepingOptions {
  /** Events are kept this long for waits that begin after them (EVENT_RETENTION_SECONDS). Default a day. */
  eventRetentionSeconds?: number;
}

/** A round, and when the next one has something to do (ms since the epoch): for a drainer that
 * sleeps until then (the Worker's clock). One statement more than housekeep(). */
export async function housekeepAndSchedule(
  db: Db,
  visibilityTimeoutSeconds: number,
  options: HousekeepingOptions = {},
): Promise<HousekeepingRound & { nextRoundAt: number }> {
  const round = await housekeep(db, visibilityTimeoutSeconds, options);
  const due = await housekeepingDueAt(db, visibilityTimeoutSeconds);
  return { ...round, nextRoundAt: Math.min(round.history.nextRoundAt, due ?? Infinity) };
}

/** One round. `visibilityTimeoutSeconds` applies only to jobs locked without a lease end (older drainers). */
export async function housekeep(
  db: Db,
  visibilityTimeoutSeconds: number,
  options: HousekeepingOptions = {},
): Promise<HousekeepingRound> {
  const reaped = await reap(db, visibilityTimeoutSeconds);
  await rollUpCounts(db);
  const pruned = await pruneFinished(db, undefined, options.eventRetentionSeconds);
  const history = await maintainHistory(db);
  return { reaped, pruned, history };
}
