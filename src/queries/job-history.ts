// job-history: kept jobs once finished live in pgdrain.job_history (src/db/schema.ts, drizzle/
// 0010_job_history.sql), not in the table every claim walks. The statement that completes a kept
// job moves it there (complete.ts); the housekeeping round moves what other paths finished in
// pgdrain.jobs (a cancelled kept job, rows an older version kept there) in batches, creates the day
// partitions ahead and drops those whose keeps are over (pgdrain.maintain_history()). Readers see
// both tables through the view pgdrain.jobs_and_history.
import { type SQL, getTableColumns, sql } from 'drizzle-orm';
import { jobHistory, jobs } from '../db/schema.ts';
import { PGDRAIN_SCHEMA } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

const historyColumnNames = Object.values(getTableColumns(jobHistory)).map((c) => c.name);

/** The history's columns, for `INSERT INTO job_history (…) SELECT … FROM moved`. */
export const HISTORY_COLUMNS = sql.raw(historyColumnNames.map((name) => `"${name}"`).join(', '));

/** A RETURNING list that gives the history's row for the job `j`: its own columns, but those
 * given here (by column name) computed as they are. */
export function historyRow(computed: Record<string, SQL>): SQL {
  return sql.join(
    historyColumnNames.map((name) => sql`${computed[name] ?? sql.raw(`j."${name}"`)} AS ${sql.raw(`"${name}"`)}`),
    sql`, `,
  );
}

/**
 * `moved AS (…), stored AS (…)`: CTEs for the housekeeping round's statement (prune.ts) that move
 * up to `limit` kept jobs still in pgdrain.jobs to the history — finished, kept, no dedupe key,
 * keep not over: a cancelled kept job (pgdrain.cancel() ends it in place), rows an older version
 * kept there. Locked rows are skipped: a concurrent settlement or cancel has them. `stored` returns
 * a row per job moved.
 */
export function moveKeptToHistory(enabled: boolean, limit: number): SQL {
  return sql`moved AS (
      DELETE FROM ${jobs} j WHERE ${enabled} AND j.id IN (
        SELECT id FROM ${jobs} WHERE status IN ('completed', 'cancelled') AND keep_until > now() AND dedupe_key IS NULL
         ORDER BY keep_until LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING ${historyRow({})}),
    stored AS (INSERT INTO ${jobHistory} (${HISTORY_COLUMNS}) SELECT ${HISTORY_COLUMNS} FROM moved RETURNING 1)`;
}

export interface HistoryUpkeep {
  /** Day partitions created ahead. */
  created: number;
  /** Partitions whose day is over, emptied and dropped. */
  dropped: number;
  /** Rows of the default partition past their keep, deleted. */
  pruned: number;
  /** When it next has something to do (ms since the epoch): the housekeeping round's, not a job's. */
  nextRoundAt: number;
}

/** pgdrain.maintain_history(): partitions ahead, expired days dropped whole. */
export async function maintainHistory(db: Db): Promise<HistoryUpkeep> {
  const [row] = await rowsOf<Omit<HistoryUpkeep, 'nextRoundAt'> & { next_due: Date | string }>(
    db,
    sql`SELECT created, dropped, pruned, next_due FROM ${sql.raw(PGDRAIN_SCHEMA)}.maintain_history()`,
  );
  return {
    created: Number(row?.created ?? 0),
    dropped: Number(row?.dropped ?? 0),
    pruned: Number(row?.pruned ?? 0),
    nextRoundAt: row ? new Date(row.next_due).getTime() : Date.now() + 3_600_000,
  };
}
