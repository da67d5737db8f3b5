// Limits per group key, from data: a tenant's own concurrency and rate, overriding its kind's
// groupConcurrency and per-group rateLimit for that key (a paying tenant 10 at once, a free one 1).
// One check, groupLimitsProblem(), for every way in (TypeScript here, PUT /kinds/:kind/groups/:groupKey/limits;
// pgdrain.set_group_limits() in SQL checks the same bounds).
import { KIND_PATTERN, KIND_PATTERN_MESSAGE, MAX_GROUP_KEY_LENGTH, keyProblem } from '../db/constants.ts';
import { type Db, deleteGroupLimits, writeGroupLimits } from '../queries/index.ts';
import { MAX_RATE_PERIOD_SECONDS, MIN_RATE_PERIOD_SECONDS, isRatePeriod } from './definition.ts';

/** A key's own concurrency is at most this. */
export const MAX_GROUP_CONCURRENCY = 100_000;
/** A key's own rate limit is at most this many starts per period. */
export const MAX_GROUP_RATE = 1_000_000;

export interface GroupLimits {
  kind: string;
  groupKey: string;
  /** Most jobs of this key running at once (instead of the kind's groupConcurrency). */
  concurrency?: number;
  /** Most starts of this key per rolling window (instead of the kind's per-group rate limit). */
  rateLimit?: { limit: number; periodSeconds: number };
}

/** Why these limits cannot be taken, naming the field; null when they can. */
export function groupLimitsProblem(limits: GroupLimits): string | null {
  if (typeof limits.kind !== 'string' || !KIND_PATTERN.test(limits.kind)) return `kind: ${KIND_PATTERN_MESSAGE}`;
  const keyIssue = keyProblem(limits.groupKey, MAX_GROUP_KEY_LENGTH);
  if (keyIssue) return `groupKey ${keyIssue}`;
  const { concurrency, rateLimit } = limits;
  if (
    concurrency !== undefined &&
    !(Number.isInteger(concurrency) && concurrency >= 1 && concurrency <= MAX_GROUP_CONCURRENCY)
  ) {
    return `concurrency must be a whole number from 1 to ${MAX_GROUP_CONCURRENCY}`;
  }
  if (rateLimit !== undefined) {
    if (!(Number.isInteger(rateLimit?.limit) && rateLimit.limit >= 1 && rateLimit.limit <= MAX_GROUP_RATE))
      return `rateLimit.limit must be a whole number from 1 to ${MAX_GROUP_RATE}`;
    const p = rateLimit.periodSeconds;
    if (!isRatePeriod(p))
      return `rateLimit.periodSeconds must be from ${MIN_RATE_PERIOD_SECONDS} to ${MAX_RATE_PERIOD_SECONDS}`;
  }
  if (concurrency === undefined && rateLimit === undefined)
    return "give concurrency, rateLimit or both (removeGroupLimits removes a key's limits)";
  return null;
}

/**
 * Gives one group key of a kind limits of its own: `concurrency` instead of the kind's
 * groupConcurrency, `rateLimit` instead of its per-group rate limit (a kind limited per group).
 * Replaces what the key had; in effect at the next claim of every drainer. Throws RangeError naming
 * the field before anything is written.
 *
 *   await setGroupLimits(db, { kind: 'sync-account', groupKey: 'tenant:acme', concurrency: 10 });
 */
export async function setGroupLimits(db: Db, limits: GroupLimits): Promise<void> {
  const problem = groupLimitsProblem(limits);
  if (problem) throw new RangeError(problem);
  await writeGroupLimits(db, limits.kind, limits.groupKey, limits.concurrency ?? null, limits.rateLimit ?? null);
}

/** The key goes back to its kind's limits. Resolves whether it had limits of its own. */
export async function removeGroupLimits(db: Db, key: { kind: string; groupKey: string }): Promise<boolean> {
  const problem = groupLimitsProblem({ ...key, concurrency: 1 });
  if (problem) throw new RangeError(problem);
  return deleteGroupLimits(db, key.kind, key.groupKey);
}
