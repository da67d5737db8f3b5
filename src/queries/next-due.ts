// next-due: when the queue next has something for a drainer that found nothing more to claim —
// the earliest run_at of a pending job still in the future (a delay, a retry's backoff), among the
// kinds it drains and not paused. The Worker's clock (src/worker/clock.ts) sleeps until then. It is
// a part of the claim's own statement, evaluated only when the claim came back short: no round
// trip of its own.
//
// jobs_ready is ordered by priority first, so the earliest run_at is not its first entry: one
// probe per distinct priority (a skip scan by recursion: the next lower priority, then its
// earliest future job), a handful of index lookups whatever the backlog.
import { type SQL, sql } from 'drizzle-orm';
import { jobs, pausedKinds } from '../db/schema.ts';

/** A scalar subquery: the next future run_at among pending jobs of `kinds` (all: undefined). */
export function nextDueSql(kinds: readonly string[] | undefined): SQL {
  const ofKinds = kinds ? sql`AND r.kind = ANY(${sql.param(kinds)}::text[])` : sql``;
  return sql`(WITH RECURSIVE priorities(p) AS (
      (SELECT priority FROM ${jobs} WHERE status = 'pending' ORDER BY priority DESC NULLS LAST LIMIT 1)
      UNION ALL
      SELECT (SELECT priority FROM ${jobs} WHERE status = 'pending' AND priority < priorities.p
        ORDER BY priority DESC NULLS LAST LIMIT 1)
        FROM priorities WHERE priorities.p IS NOT NULL)
    SELECT min((SELECT r.run_at FROM ${jobs} r
                 WHERE r.status = 'pending' AND r.priority = priorities.p AND r.run_at > now() ${ofKinds}
                   AND NOT EXISTS (SELECT 1 FROM ${pausedKinds} x WHERE x.kind = r.kind)
                 ORDER BY r.priority DESC NULLS LAST, r.run_at LIMIT 1))
      FROM priorities WHERE priorities.p IS NOT NULL)`;
}
