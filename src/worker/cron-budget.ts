// How long one cron invocation may drain. The platform limits a cron invocation's CPU time (30 s
// by default, up to 5 minutes with `[limits] cpu_ms`) and its wall-clock time (15 minutes); waiting
// on the database is not CPU, and a drain is mostly waiting. So by default an invocation drains
// until just before the next invocation of the same cron: with `* * * * *` consecutive invocations
// leave no idle gap and do not pile up. DRAIN_BUDGET_MS overrides.
import { Cron } from 'croner';

/** Cron invocations may run this long in wall-clock time. */
export const MAX_CRON_WALL_MS = 15 * 60_000;
/** Ended this long before the next tick, so the next invocation starts on a quiet queue. */
export const NEXT_TICK_MARGIN_MS = 1_000;
/** The budget when the cron expression cannot be read (a test's made-up one, say). */
export const DEFAULT_BUDGET_MS = 25_000;

/** The wall-clock budget of the invocation that `cron` triggered at `scheduledTime`, from `now`. */
export function cronBudgetMs(cron: string, scheduledTime: number, now = Date.now()): number {
  let next: Date | null = null;
  try {
    // Cloudflare's cron triggers run in UTC.
    next = new Cron(cron, { timezone: 'UTC', paused: true }).nextRun(new Date(scheduledTime));
  } catch {
    return DEFAULT_BUDGET_MS;
  }
  if (!next) return DEFAULT_BUDGET_MS;
  const untilNextTick = next.getTime() - now - NEXT_TICK_MARGIN_MS;
  return Math.max(1_000, Math.min(MAX_CRON_WALL_MS - (now - scheduledTime) - NEXT_TICK_MARGIN_MS, untilNextTick));
}
