// housekeeping-due: when the housekeeping round (src/drain/housekeeping.ts) next has something to
// do, for a drainer that sleeps until then (the Worker's clock): the earliest lease end of a
// running job (the reaper), the earliest keep end of a kept job left in pgdrain.jobs (the prune),
// when the oldest per-minute count leaves its retention (the roll-up, within the hour after), when
// the oldest note of a watched job expires, and at once when a workflow run waits to be looked at
// again (pgdrain.runs_to_recheck: prune.ts). (A pending job's run_at, a snoozed workflow's among them,
// is the drain's: its claims report it.) The history's own moment comes from
// pgdrain.maintain_history(). Each part reads one end of a small index or table.
import { sql } from 'drizzle-orm';
import { finishedJobs, jobCounts, jobs, runsToRecheck } from '../db/schema.ts';
import { COUNTS_RETENTION_HOURS } from './counts.ts';
import { type Db, rowsOf } from './db.ts';
import { FINISHED_NOTE_MINUTES } from './prune.ts';

/** The next moment (ms since the epoch), or null when nothing is pending for housekeeping. A
 * running job locked without a lease end (an older drainer) counts `visibilityTimeoutSeconds`
 * from its lock. */
export async function housekeepingDueAt(db: Db, visibilityTimeoutSeconds: number): Promise<number | null> {
  const [row] = await rowsOf<{ due: Date | string | null }>(
    db,
    sql`SELECT least(
          (SELECT min(coalesce(locked_until, locked_at + make_interval(secs => ${visibilityTimeoutSeconds}::int)))
            FROM ${jobs} WHERE status = 'running'),
          (SELECT min(keep_until) FROM ${jobs} WHERE status IN ('completed', 'cancelled')),
          (SELECT min(minute) + make_interval(hours => ${COUNTS_RETENTION_HOURS + 1}::int) FROM ${jobCounts}),
          (SELECT min(finished_at) + make_interval(mins => ${FINISHED_NOTE_MINUTES}::int) FROM ${finishedJobs}),
          (SELECT min(since) + make_interval(secs => 1) FROM ${runsToRecheck})) AS due`,
  );
  return row?.due == null ? null : new Date(row.due).getTime();
}
