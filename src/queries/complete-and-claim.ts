// complete-and-claim: ONE statement settles the jobs that finished and claims the next batch —
//   WITH done AS (DELETE … RETURNING), counted AS (INSERT INTO job_counts …), claimed AS (UPDATE …
//   claim … RETURNING) SELECT the ids deleted, the rows claimed
// — so a drainer far from its database (a Worker at 10-30 ms from Neon) pays one round trip per
// cycle instead of two. Both parts are exactly the standalone statements (complete.ts, claim.ts):
// the same fencing by lock token, the same claim order and SKIP LOCKED. They run on one snapshot
// and touch different rows (the DELETE running ones, the claim pending ones), and commit together.
import { type SQL, sql } from 'drizzle-orm';
import { type ClaimedJob, type ClaimOptions, claimStatement, compareIds } from './claim.ts';
import { type HeldJob, type SettleOptions, deleteCompleted } from './complete.ts';
import { countCompleted } from './counts.ts';
import { type Db, rowsOf } from './db.ts';

export interface CompleteAndClaimResult {
  /** Ids actually deleted (a job reaped and re-claimed elsewhere is refused by its token). */
  completed: string[];
  claimed: ClaimedJob[];
}

interface ClaimedRow {
  id: string | number;
  kind: string;
  payload: unknown;
  attempts: number;
  max_attempts: number;
  priority: number;
  run_at: string;
  visibility_seconds: number | null;
  created_at: string;
}

export async function completeAndClaim(
  db: Db,
  held: readonly HeldJob[],
  options: ClaimOptions,
  settle: SettleOptions = {},
): Promise<CompleteAndClaimResult> {
  const claiming = options.batchSize >= 1 && options.kinds?.length !== 0 && options.ids?.length !== 0;
  const claimSql: SQL = claimStatement(db, options.kinds !== undefined, options.ids !== undefined, {
    limit: claiming ? options.batchSize : 0,
    token: options.lockToken,
    kinds: options.kinds ?? [],
    ids: options.ids ?? [],
  }).getSQL();
  const counted = settle.recordCounts === false ? sql`` : sql`, counted AS (${countCompleted('done')})`;
  // One row: the claimed rows travel as JSON so that a claim of none still reports the deletions.
  const [row] = await rowsOf<{ completed: (string | number)[] | null; claimed: ClaimedRow[] | null }>(
    db,
    sql`WITH done AS (${deleteCompleted(held)})${counted},
             claimed AS (${claimSql})
        SELECT (SELECT array_agg(id) FROM done) AS completed,
               (SELECT json_agg(json_build_object(
                  'id', id::text, 'kind', kind, 'payload', payload, 'attempts', attempts, 'max_attempts', max_attempts,
                  'priority', priority, 'run_at', run_at, 'visibility_seconds', visibility_seconds, 'created_at', created_at))
                  FROM claimed) AS claimed`,
  );
  const claimed = (row?.claimed ?? []).map(
    (r): ClaimedJob => ({
      id: String(r.id),
      kind: r.kind,
      payload: r.payload,
      attempts: r.attempts,
      maxAttempts: r.max_attempts,
      priority: r.priority,
      runAt: new Date(r.run_at),
      lockedBy: options.lockToken,
      visibilitySeconds: r.visibility_seconds,
      createdAt: new Date(r.created_at),
    }),
  );
  // As claim(): work starts in claim order.
  claimed.sort((a, b) => b.priority - a.priority || a.runAt.getTime() - b.runAt.getTime() || compareIds(a.id, b.id));
  return { completed: (row?.completed ?? []).map(String), claimed };
}
