// prune: what a kept history leaves behind, removed once its time is up — completed and cancelled
// jobs past their keep_until still in pgdrain.jobs (kept jobs with a dedupe key, which stay there),
// notes of how watched jobs ended (kept 10 minutes), and dependency rows of jobs that are gone —
// and kept jobs finished in pgdrain.jobs moved to the history (job-history.ts), whose own expired
// days go whole (maintainHistory). In bounded batches, each round its own short statement, so a
// large history never means one long transaction. Run with the reaper's round on the sidecar and
// every cron invocation on the Worker. It also prunes events past their retention, and the steps of
// workflows that are gone (workflows.ts), and it releases the workflow runs an ending statement
// passed by (pgdrain.runs_to_recheck: src/sql/functions/after_jobs_ended.sql).
import { sql } from 'drizzle-orm';
import { finishedJobs, jobDependencies, jobs, runsToRecheck, workflowSteps } from '../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from './db.ts';
import { moveKeptToHistory } from './job-history.ts';
import { pruneWorkflowsCtes } from './workflows.ts';
import { DEFAULT_EVENT_RETENTION_SECONDS } from '../db/constants.ts';

export const PRUNE_BATCH = 5_000;
/** How long a note of how a watched, deleted job ended is kept. */
export const FINISHED_NOTE_MINUTES = 10;

export interface PruneResult {
  /** Kept jobs deleted. */
  jobs: number;
  /** Kept jobs moved from pgdrain.jobs to the history. */
  moved: number;
  notes: number;
  dependencies: number;
  /** Events past their retention deleted. */
  events: number;
  /** Steps of workflows that are gone deleted. */
  steps: number;
  /** Workflow runs passed by when their child ended, made pending now (runsToRecheck). */
  rechecked: number;
}

/** Runs looked at again per round (runs_to_recheck is empty but for a rare race). */
const RECHECK_BATCH = 100;

/**
 * Up to `maxBatches` batches of each; call again if more is left. A round is one statement that
 * deletes a batch of each of the three (one round trip: the Worker runs this at every invocation,
 * usually with nothing to do); rounds go on for those whose batch was full. Dependency rows of jobs
 * deleted in the same round go in the next one (a statement does not see its own deletions).
 */
export async function pruneFinished(
  db: Db,
  maxBatches = 20,
  eventRetentionSeconds = DEFAULT_EVENT_RETENTION_SECONDS,
): Promise<PruneResult> {
  const result: PruneResult = { jobs: 0, moved: 0, notes: 0, dependencies: 0, events: 0, steps: 0, rechecked: 0 };
  const more = { jobs: true, moved: true, notes: true, dependencies: true, events: true, steps: true };
  const parts = ['jobs', 'moved', 'notes', 'dependencies', 'events', 'steps'] as const;
  for (let round = 0; round < maxBatches && parts.some((p) => more[p]); round++) {
    const [n] = await rowsOf<PruneResult & { notified: number }>(
      db,
      sql`WITH kept AS (
            DELETE FROM ${jobs} WHERE ${more.jobs} AND id IN (
              SELECT id FROM ${jobs} WHERE status IN ('completed', 'cancelled') AND keep_until < now()
               ORDER BY keep_until LIMIT ${PRUNE_BATCH} FOR UPDATE SKIP LOCKED)
            RETURNING 1),
          ${moveKeptToHistory(more.moved, PRUNE_BATCH)},
          notes AS (
            DELETE FROM ${finishedJobs} WHERE ${more.notes} AND id IN (
              SELECT id FROM ${finishedJobs}
                WHERE finished_at < now() - make_interval(mins => ${FINISHED_NOTE_MINUTES}) LIMIT ${PRUNE_BATCH})
            RETURNING 1),
          dependencies AS (
            DELETE FROM ${jobDependencies} d WHERE ${more.dependencies} AND (d.depends_on, d.job_id) IN (
              SELECT depends_on, job_id FROM ${jobDependencies} o
                WHERE NOT EXISTS (SELECT 1 FROM ${jobs} j WHERE j.id = o.job_id) LIMIT ${PRUNE_BATCH})
            RETURNING 1),
          ${pruneWorkflowsCtes(eventRetentionSeconds, PRUNE_BATCH, more)},
          ${recheckPassedRunsCtes(round === 0)}
          SELECT (SELECT count(*) FROM kept)::int AS jobs, (SELECT count(*) FROM stored)::int AS moved,
            (SELECT count(*) FROM notes)::int AS notes,
                 (SELECT count(*) FROM dependencies)::int AS dependencies,
                   (SELECT count(*) FROM events_pruned)::int AS events,
                 (SELECT count(*) FROM steps_pruned)::int AS steps,
                 (SELECT count(*) FROM recheck_released)::int AS rechecked,
                 (SELECT count(pg_notify(${NOTIFY_CHANNEL}, kind)) FROM recheck_released)::int AS notified`,
    );
    result.rechecked += Number(n?.rechecked ?? 0);
    for (const part of parts) {
      const deleted = Number(n?.[part] ?? 0);
      result[part] += deleted;
      more[part] &&= deleted >= PRUNE_BATCH;
    }
  }
  return result;
}

/**
 * `recheck_released`: the workflow runs pgdrain.after_jobs_ended() passed by because another
 * transaction held them, made pending when they still wait for a child that
 * has ended — as the ending statement would have. A run still held stays noted for the next round;
 * a note whose run is gone, or no longer parked on an ended child, is dropped.
 */
function recheckPassedRunsCtes(enabled: boolean) {
  return sql`recheck_candidates AS MATERIALIZED (
      SELECT run_id FROM ${runsToRecheck} WHERE ${enabled}
       ORDER BY run_id LIMIT ${RECHECK_BATCH} FOR UPDATE SKIP LOCKED),
    recheck_locked AS MATERIALIZED (
      SELECT j.id FROM ${jobs} j WHERE j.id IN (SELECT run_id FROM recheck_candidates) FOR UPDATE OF j SKIP LOCKED),
    recheck_released AS (
      UPDATE ${jobs} j SET waiting_for = 0, status = 'pending'
       WHERE j.id IN (SELECT id FROM recheck_locked) AND j.status = 'waiting'
         AND EXISTS (SELECT 1 FROM ${workflowSteps} s
                      WHERE s.job_id = j.id AND s.status = 'waiting' AND s.child_id IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM ${jobs} c
                                         WHERE c.id = s.child_id AND c.status IN ('pending', 'running', 'waiting')))
      RETURNING j.kind),
    rechecked AS (
      DELETE FROM ${runsToRecheck} r
       WHERE r.run_id IN (SELECT id FROM recheck_locked)
          OR (r.run_id IN (SELECT run_id FROM recheck_candidates)
              AND NOT EXISTS (SELECT 1 FROM ${jobs} j WHERE j.id = r.run_id)))`;
}
