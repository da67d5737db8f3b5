// How much of each limited kind's limits is in use right now, for /stats, /metrics and the
// dashboard: its running jobs (against globalConcurrency), its starts in the current rate window,
// and how many group keys have ready jobs (against groupConcurrency). One statement for every kind.
import { sql } from 'drizzle-orm';
import { jobs, rateStarts } from '../db/schema.ts';
import type { ClaimLimits } from './claim-limited.ts';
import { type Db, rowsOf } from './db.ts';

export interface LimitUsage {
  running: number;
  /** Starts in the current window of its rate limit (all keys together); null without one. */
  startsInWindow: number | null;
  /** Group keys with jobs ready to run; null without a groupConcurrency. */
  keysWaiting: number | null;
}

export async function limitUsage(
  db: Db,
  kinds: readonly { kind: string; limits: ClaimLimits }[],
): Promise<Record<string, LimitUsage>> {
  if (kinds.length === 0) return {};
  const periods = kinds.map((k) => k.limits.rateLimit?.periodSeconds ?? null);
  const grouped = kinds.map((k) => k.limits.groupConcurrency !== undefined);
  const rows = await rowsOf<{ kind: string; running: number; starts: number | null; keys: number | null }>(
    db,
    sql`SELECT k.kind,
               (SELECT count(*) FROM ${jobs} j WHERE j.status = 'running' AND j.kind = k.kind)::int AS running,
               CASE WHEN k.period IS NOT NULL THEN
                 (SELECT count(*) FROM ${rateStarts} s WHERE s.kind = k.kind
                   AND s.started_at > clock_timestamp() - make_interval(secs => k.period))::int END AS starts,
               CASE WHEN k.grouped THEN
                 (SELECT count(DISTINCT group_key) FROM ${jobs} j
                   WHERE j.status = 'pending' AND j.run_at <= now() AND j.kind = k.kind
                     AND j.group_key IS NOT NULL)::int END AS keys
          FROM unnest(${sql.param(kinds.map((k) => k.kind))}::text[], ${sql.param(periods)}::float8[],
            ${sql.param(grouped)}::boolean[]) AS k(kind, period, grouped)`,
  );
  return Object.fromEntries(
    rows.map((r) => [r.kind, { running: r.running, startsInWindow: r.starts, keysWaiting: r.keys }]),
  );
}
