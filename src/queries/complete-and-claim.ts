// complete-and-claim: ONE statement settles the jobs that finished and claims the next batch —
//   WITH ended AS (DELETE … RETURNING), counted AS (INSERT INTO job_counts …),
//   claimed AS (UPDATE … claim … RETURNING) SELECT the ids settled, the jobs claimed (one row)
// — so a drainer far from its database (a Worker at 10-30 ms from Neon) pays one round trip per
// cycle instead of two. Both parts are exactly the standalone statements (complete.ts, claim.ts):
// the same fencing by lock token, the same claim order and SKIP LOCKED. They run on one snapshot
// and touch different rows (the DELETE running ones, the claim pending ones), and commit together.
import { type SQL, sql } from 'drizzle-orm';
import {
  type ClaimedJob,
  type ClaimOptions,
  claimStatement,
  claimValues,
  CLAIMED_AS_JSON,
  claimedJobsFromJson,
  nextDueWhenShort,
  toDate,
} from './claim.ts';
import { type CompletedJob, type SettleOptions, completingCtes } from './complete.ts';
import { countCompleted } from './counts.ts';
import { type Db, rowsOf } from './db.ts';

export interface CompleteAndClaimResult {
  /** Ids actually deleted or kept: the others are still running, either no longer held (reaped
   * and re-claimed elsewhere: the token refuses them) or with something to follow their end
   * (jobs waiting for them, someone watching, a cancel asked): end those with completeFollowed(). */
  completed: string[];
  claimed: ClaimedJob[];
  /** Only with options.nextDue: when the next job is due, if the claim came back short (null: none is). */
  nextDueAt?: Date | null;
}

export async function completeAndClaim(
  db: Db,
  held: readonly CompletedJob[],
  options: ClaimOptions,
  settle: SettleOptions = {},
): Promise<CompleteAndClaimResult> {
  const claiming = options.batchSize >= 1 && options.kinds?.length !== 0 && options.ids?.length !== 0;
  const claimSql: SQL = claimStatement(
    { ...claimValues(options), limit: claiming ? options.batchSize : 0 },
    options.kinds !== undefined,
    options.ids !== undefined,
  );
  const counted = settle.recordCounts === false ? sql`` : sql`, counted AS (${countCompleted('ended')})`;
  // One row: the deleted ids and the claimed jobs, each as one field. The ids as one text, not an
  // array: the drivers parse arrays character by character in JavaScript (Neon's, in workerd, at
  // 1.5-3 µs an id), where a split is native; the jobs as one json value (CLAIMED_AS_JSON).
  type Row = { pgdrain_completed: string | null; pgdrain_claimed: unknown; pgdrain_next_due?: Date | string | null };
  const [row] = await rowsOf<Row>(
    db,
    sql`WITH ${completingCtes(held, { followed: false })}${counted},
             claimed AS (${claimSql})
        SELECT (SELECT string_agg(id::text, ',') FROM ended) AS pgdrain_completed,
               ${CLAIMED_AS_JSON} AS pgdrain_claimed
               ${
                 options.nextDue
                   ? sql`,
                 ${nextDueWhenShort({ ...options, batchSize: claiming ? options.batchSize : 0 })} AS
                   pgdrain_next_due`
                   : sql``
               }`,
  );
  const completedText = row?.pgdrain_completed;
  const completed = completedText ? completedText.split(',') : [];
  const claimed = claimedJobsFromJson(row?.pgdrain_claimed, options.lockToken);
  if (!options.nextDue) return { completed, claimed };
  return { completed, claimed, nextDueAt: toDate(row?.pgdrain_next_due) };
}
