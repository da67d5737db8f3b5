// Counts of settled jobs, for the dashboard's throughput chart and /metrics. Completed jobs are
// deleted, so the statements that settle jobs (complete, fail, reap) add to job_counts in the
// same statement: one upsert per kind per settled batch, never one per job, and a count that can
// neither drift from the rows nor survive a rollback of the settlement it counts.
import { type SQL, sql } from 'drizzle-orm';
import { jobCounts, jobTotals } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

/** Per-minute rows older than this are folded into job_totals by rollUpCounts(). */
export const COUNTS_RETENTION_HOURS = 24;

/** Adds the rows of the CTE `ended` (kind, new status per row) that completed to this minute's
 * completed counts (a job cancelled while it ran is not counted). */
export const countCompleted = (ended: string): SQL =>
  addToCounts(
    sql`SELECT kind, count(*) AS completed, 0 AS failed, 0 AS dead FROM ${sql.identifier(ended)}
      WHERE status = 'completed' GROUP BY kind`,
  );

/** Adds the rows of the CTE `settled` (kind, new status per row) to this minute's failed and dead
 * counts: a retry or a death is a failed attempt; a job cancelled while it ran is neither. */
export const countFailed = (settled: string): SQL =>
  addToCounts(sql`SELECT kind, 0 AS completed, count(*) AS failed, count(*) FILTER (WHERE status = 'dead') AS dead
                    FROM ${sql.identifier(settled)} WHERE status IN ('pending', 'dead') GROUP BY kind`);

/**
 * A statement that adds `perKind` (rows of kind, completed, failed, dead) to this minute's
 * counters; used as a data-modifying CTE of the settling statement. Rows are upserted in kind
 * order so two settlements touching the same kinds lock their counter rows in the same order
 * (the usual guard against lock-order deadlocks).
 */
function addToCounts(perKind: SQL): SQL {
  return sql`INSERT INTO ${jobCounts} AS c (minute, kind, completed, failed, dead)
      SELECT date_trunc('minute', now()), n.kind, n.completed, n.failed, n.dead FROM (${perKind}) AS n ORDER BY n.kind
      ON CONFLICT (minute, kind) DO UPDATE SET completed = c.completed + excluded.completed,
        failed = c.failed + excluded.failed, dead = c.dead + excluded.dead`;
}

export interface MinuteCounts {
  /** The start of the minute. */
  minute: Date;
  completed: number;
  failed: number;
  dead: number;
}

/** The last `minutes` minutes, oldest first, the current (partial) minute last; empty minutes are zeros. */
export async function countsByMinute(db: Db, options: { minutes: number; kind?: string }): Promise<MinuteCounts[]> {
  const rows = await rowsOf<{ minute_ms: number; completed: string; failed: string; dead: string }>(
    db,
    sql`WITH span AS (
          SELECT generate_series(date_trunc('minute', now()) - make_interval(mins => ${options.minutes - 1}::int),
                                 date_trunc('minute', now()), interval '1 minute') AS minute)
        SELECT extract(epoch from span.minute)::float8 * 1000 AS minute_ms,
               coalesce(sum(c.completed), 0) AS completed, coalesce(sum(c.failed), 0) AS failed,
                 coalesce(sum(c.dead), 0) AS dead
          FROM span LEFT
            JOIN ${jobCounts} c ON c.minute = span.minute ${
              options.kind === undefined
                ? sql``
                : sql`AND c.kind
              = ${options.kind}`
            }
         GROUP BY span.minute ORDER BY span.minute`,
  );
  return rows.map((r) => ({
    minute: new Date(Number(r.minute_ms)),
    completed: Number(r.completed),
    failed: Number(r.failed),
    dead: Number(r.dead),
  }));
}

export interface KindTotals {
  completed: number;
  failed: number;
  dead: number;
  /** Workflow runs held because their code no longer matched their history (pgdrain.hold_run()). */
  diverged: number;
}

/** Everything ever counted, per kind (Prometheus counters: they only go up). One statement, one snapshot. */
export async function countTotals(db: Db): Promise<Record<string, KindTotals>> {
  const rows = await rowsOf<{ kind: string; completed: string; failed: string; dead: string; diverged: string }>(
    db,
    sql`SELECT kind, sum(completed) AS completed, sum(failed) AS failed, sum(dead) AS dead, sum(diverged) AS diverged
          FROM (SELECT kind, completed, failed, dead, diverged FROM ${jobTotals}
                UNION ALL SELECT kind, completed, failed, dead, diverged FROM ${jobCounts}) AS t
         GROUP BY kind ORDER BY kind`,
  );
  const totals: Record<string, KindTotals> = {};
  for (const r of rows)
    totals[r.kind] = {
      completed: Number(r.completed),
      failed: Number(r.failed),
      dead: Number(r.dead),
      diverged: Number(r.diverged),
    };
  return totals;
}

/**
 * Moves per-minute rows older than the retention into job_totals, so job_counts stays small and
 * the totals stay exact. Safe to run from several processes at once: a row is deleted, and so
 * added, by one of them only. Returns how many minute rows were folded.
 */
export async function rollUpCounts(db: Db, retentionHours = COUNTS_RETENTION_HOURS): Promise<number> {
  const rows = await rowsOf<{ folded: number }>(
    db,
    sql`WITH old AS (
          DELETE FROM ${jobCounts} WHERE minute < now() - make_interval(hours => ${retentionHours}::int)
          RETURNING kind, completed, failed, dead, diverged),
        added AS (
          INSERT INTO ${jobTotals} AS t (kind, completed, failed, dead, diverged)
          SELECT kind, sum(completed), sum(failed), sum(dead), sum(diverged) FROM old GROUP BY kind ORDER BY kind
          ON CONFLICT (kind) DO UPDATE SET completed = t.completed + excluded.completed,
            failed = t.failed + excluded.failed, dead = t.dead + excluded.dead,
            diverged = t.diverged + excluded.diverged)
        SELECT count(*)::int AS folded FROM old`,
  );
  return rows[0]?.folded ?? 0;
}
