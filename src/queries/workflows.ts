// workflows: the statements of durable workflows (src/workflows/) — a run's stored steps, a step's
// record, the parks (a sleep, a wait for an event, a child), the wake-up of what is due, and events.
//
// Every write a run makes is fenced like a settlement (fence.ts): it happens only while the job is
// still running under the lock token of the claim that started this attempt (`held` below, which
// locks the row so the reaper cannot take it back mid-statement). A statement that finds the job
// not held says why — its lease was lost, or someone asked to cancel it — and writes nothing.
//
// A park ends the attempt without spending one: the job leaves `running` for `waiting` (its lock
// cleared, its attempt refunded) and the step row says until when or for what. What wakes it:
//   sleeping                  pgdrain.wake_workflows() at wake_at (the housekeeping round, and the
//                             drainer that parked it, which knows the time)
//   waiting for an event      pgdrain.send_event() in the sender's transaction; its timeout as a sleep
//   waiting for a child       the child's end (job-ended.ts: the `after` machinery)
import { type SQL, sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA, jobDependencies, jobs, jobsAndHistory, workflowEvents, workflowSteps } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

/** A run's attempt, as its drainer holds it. */
export interface HeldRun {
  jobId: string;
  lockedBy: string;
}

/** Why a fenced write wrote nothing. */
export type NotHeld = 'lost' | 'cancelled';

export type StepStatus = 'completed' | 'failed' | 'sleeping' | 'waiting';

/** A step as stored, with its child's end for step.invoke. */
export interface StoredStep {
  name: string;
  position: number;
  status: StepStatus;
  attempts: number;
  result: unknown;
  error: string | null;
  startedAt: Date;
  finishedAt: Date | null;
  wakeAt: Date | null;
  event: string | null;
  eventKey: string | null;
  eventId: string | null;
  childId: string | null;
  /** step.invoke: the child's status and outcome (null: it is gone). */
  child: { status: string; result: unknown; lastError: string | null } | null;
}

/** How long an event is kept by default for waits that begin after it was sent. */
export const DEFAULT_EVENT_RETENTION_SECONDS = 86_400;

/** `lock`: UPDATE for a park (it changes the row), SHARE for a record that must commit before the
 * reaper can take the job back (a transactional step's, whose writes commit with it), none for a
 * plain step's record (its effect happened whoever holds the job now: recording it only spares a
 * rerun). */
const RUNNING_HELD = (run: HeldRun, lock: 'UPDATE' | 'SHARE' | null) =>
  sql`held AS MATERIALIZED (SELECT id, created_at FROM ${jobs}
        WHERE id = ${run.jobId}::bigint AND locked_by = ${run.lockedBy} AND status = 'running' AND cancel_requested_at IS NULL
        ${lock ? sql.raw(`FOR ${lock}`) : sql``})`;

/** Why `held` came back empty (evaluated only then). */
const WHY_NOT_HELD = (run: HeldRun) =>
  sql`(SELECT CASE WHEN locked_by = ${run.lockedBy} AND cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'lost' END
         FROM ${jobs} WHERE id = ${run.jobId}::bigint AND NOT EXISTS (SELECT 1 FROM held))`;

/** The job leaves `running` for `waiting`, its attempt refunded (a park is not a failure). */
const PARK = (waitingFor: SQL) =>
  sql`UPDATE ${jobs} j SET status = 'waiting', waiting_for = ${waitingFor}, locked_at = NULL, locked_by = NULL, locked_until = NULL,
             attempts = greatest(j.attempts - 1, 0)
        FROM held WHERE j.id = held.id`;

interface FencedRow {
  not_held: NotHeld | null;
}

const notHeld = (row: FencedRow | undefined): NotHeld => row?.not_held ?? 'lost';

/** Every step the run has reached, in the order it first reached them. */
export async function loadSteps(db: Db, jobId: string): Promise<StoredStep[]> {
  const rows = await rowsOf<Record<string, unknown>>(
    db,
    sql`SELECT s.name, s.position, s.status, s.attempts, s.result, s.error, s.started_at, s.finished_at, s.wake_at, s.event, s.event_key,
               s.event_id::text AS event_id, s.child_id::text AS child_id, c.status AS child_status, c.result AS child_result, c.last_error AS child_error
          FROM ${workflowSteps} s LEFT JOIN LATERAL (
            SELECT status, result, last_error FROM ${jobsAndHistory} h WHERE s.child_id IS NOT NULL AND h.id = s.child_id LIMIT 1) c ON true
         WHERE s.job_id = ${jobId}::bigint ORDER BY s.position`,
  );
  return rows.map(stepFromRow);
}

function stepFromRow(r: Record<string, unknown>): StoredStep {
  const date = (v: unknown) => (v == null ? null : v instanceof Date ? v : new Date(v as string));
  const json = (v: unknown) => (typeof v === 'string' ? (JSON.parse(v) as unknown) : v);
  return {
    name: r.name as string,
    position: Number(r.position),
    status: r.status as StepStatus,
    attempts: Number(r.attempts),
    result: r.result == null ? undefined : json(r.result),
    error: (r.error as string | null) ?? null,
    startedAt: date(r.started_at)!,
    finishedAt: date(r.finished_at),
    wakeAt: date(r.wake_at),
    event: (r.event as string | null) ?? null,
    eventKey: (r.event_key as string | null) ?? null,
    eventId: (r.event_id as string | null) ?? null,
    childId: (r.child_id as string | null) ?? null,
    child: r.child_status == null ? null : { status: r.child_status as string, result: r.child_result == null ? undefined : json(r.child_result), lastError: (r.child_error as string | null) ?? null },
  };
}

export interface StepRecord extends HeldRun {
  name: string;
  position: number;
  startedAt: Date;
  /** Runs of it before this one (failed). */
  priorAttempts: number;
}

/** The step completed: its result stored (JSON text, or null for undefined). Fenced; `transactional`:
 * in the step's own transaction, the job's row share-locked until it commits (the reaper cannot take
 * it back between the fence and the commit, so nobody runs the step again meanwhile). */
export async function recordStepCompleted(db: Db, step: StepRecord, resultJson: string | null, { transactional = false } = {}): Promise<NotHeld | null> {
  const [row] = await rowsOf<FencedRow & { written: number }>(
    db,
    sql`WITH ${RUNNING_HELD(step, transactional ? 'SHARE' : null)},
        written AS (
          INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, result, error, started_at, finished_at)
          SELECT id, ${step.name}, ${step.position}::int, 'completed', ${step.priorAttempts + 1}::int, ${resultJson}::jsonb, NULL, ${step.startedAt.toISOString()}::timestamptz, now() FROM held
          ON CONFLICT (job_id, name) DO UPDATE SET status = 'completed', attempts = excluded.attempts, result = excluded.result, error = NULL,
            started_at = excluded.started_at, finished_at = now(), wake_at = NULL
          RETURNING 1)
        SELECT (SELECT count(*) FROM written)::int AS written, ${WHY_NOT_HELD(step)} AS not_held`,
  );
  return row && row.written > 0 ? null : notHeld(row);
}

/** The step threw: its error and attempts stored (it runs again at the job's next attempt). Fenced. */
export async function recordStepFailed(db: Db, step: StepRecord, error: string): Promise<void> {
  await db.execute(
    sql`WITH ${RUNNING_HELD(step, null)}
        INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, error, started_at, finished_at)
        SELECT id, ${step.name}, ${step.position}::int, 'failed', ${step.priorAttempts + 1}::int, ${error}, ${step.startedAt.toISOString()}::timestamptz, now() FROM held
        ON CONFLICT (job_id, name) DO UPDATE SET status = 'failed', attempts = excluded.attempts, error = excluded.error, finished_at = now()`,
  );
}

/** What a park did: `parked` (the job waits now), `done` (nothing to wait for: the step completed,
 * with `result` for a wait), or why the job was not held. */
export type ParkOutcome = { outcome: 'parked'; wakeAt: Date | null } | { outcome: 'done'; result: unknown } | { outcome: NotHeld };

/**
 * step.sleep: parks the run until `until` (kept from a first park: a sleep's end does not move when
 * the run is re-entered), or, when that time has come, completes the step. Fenced.
 */
export async function parkSleep(db: Db, step: StepRecord, until: Date): Promise<ParkOutcome> {
  const [row] = await rowsOf<FencedRow & { status: StepStatus | null; wake_at: Date | string | null }>(
    db,
    sql`WITH ${RUNNING_HELD(step, 'UPDATE')},
        ends AS (SELECT coalesce((SELECT wake_at FROM ${workflowSteps} WHERE job_id = ${step.jobId}::bigint AND name = ${step.name} AND status = 'sleeping'),
                                 ${until.toISOString()}::timestamptz) AS at),
        written AS (
          INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, started_at, finished_at, wake_at)
          SELECT held.id, ${step.name}, ${step.position}::int, CASE WHEN ends.at <= now() THEN 'completed' ELSE 'sleeping' END, 1,
                 ${step.startedAt.toISOString()}::timestamptz, CASE WHEN ends.at <= now() THEN now() END, CASE WHEN ends.at > now() THEN ends.at END
            FROM held, ends
          ON CONFLICT (job_id, name) DO UPDATE SET status = excluded.status, finished_at = excluded.finished_at, wake_at = excluded.wake_at
          RETURNING status, wake_at),
        parked AS (${PARK(sql`NULL`)} AND EXISTS (SELECT 1 FROM written WHERE status = 'sleeping') RETURNING 1)
        SELECT (SELECT status FROM written) AS status, (SELECT wake_at FROM written) AS wake_at, (SELECT count(*) FROM parked) AS parked,
               ${WHY_NOT_HELD(step)} AS not_held`,
  );
  return parkOutcome(row, null);
}

export interface EventWait extends StepRecord {
  event: string;
  key: string;
  /** The wait's timeout (from its first park); null: none. */
  until: Date | null;
}

/**
 * step.waitForEvent: the first event of this name and key sent since the run was enqueued that no
 * earlier wait of the run took answers it at once; none: the run parks until one is sent (or its
 * timeout, when the step completes with null). Under the event's lock (pgdrain.send_event() takes
 * it too), so an event sent meanwhile is either seen here or sees the park. Fenced.
 */
export function waitForEvent(db: Db, wait: EventWait): Promise<ParkOutcome> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtextextended(${`pgdrain.event:${wait.event}:${wait.key}`}, 0))`);
    const [row] = await rowsOf<FencedRow & { status: StepStatus | null; wake_at: Date | string | null; result: unknown }>(
      tx,
      sql`WITH ${RUNNING_HELD(wait, 'UPDATE')},
          found AS (
            SELECT e.id, e.payload FROM ${workflowEvents} e, held
             WHERE e.event = ${wait.event} AND e.event_key = ${wait.key} AND e.sent_at >= held.created_at
               AND e.id > coalesce((SELECT max(s.event_id) FROM ${workflowSteps} s
                                     WHERE s.job_id = held.id AND s.event = ${wait.event} AND s.event_key = ${wait.key} AND s.name <> ${wait.name}), 0)
             ORDER BY e.id LIMIT 1),
          ends AS (SELECT coalesce((SELECT wake_at FROM ${workflowSteps} WHERE job_id = ${wait.jobId}::bigint AND name = ${wait.name} AND status = 'waiting'),
                                   ${wait.until?.toISOString() ?? null}::timestamptz) AS at),
          answer AS (
            SELECT held.id AS job_id, found.id AS event_id, found.payload,
                   CASE WHEN found.id IS NOT NULL OR ends.at <= now() THEN 'completed' ELSE 'waiting' END AS status, ends.at
              FROM held CROSS JOIN ends LEFT JOIN found ON true),
          written AS (
            INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, result, started_at, finished_at, wake_at, event, event_key, event_id)
            SELECT job_id, ${wait.name}, ${wait.position}::int, status, 1, CASE WHEN status = 'completed' THEN coalesce(payload, 'null'::jsonb) END,
                   ${wait.startedAt.toISOString()}::timestamptz, CASE WHEN status = 'completed' THEN now() END, CASE WHEN status = 'waiting' THEN at END,
                   ${wait.event}, ${wait.key}, event_id
              FROM answer
            ON CONFLICT (job_id, name) DO UPDATE SET status = excluded.status, result = excluded.result, finished_at = excluded.finished_at,
              wake_at = excluded.wake_at, event = excluded.event, event_key = excluded.event_key, event_id = excluded.event_id
            RETURNING status, wake_at, result),
          parked AS (${PARK(sql`NULL`)} AND EXISTS (SELECT 1 FROM written WHERE status = 'waiting') RETURNING 1)
          SELECT (SELECT status FROM written) AS status, (SELECT wake_at FROM written) AS wake_at, (SELECT result FROM written) AS result,
                 (SELECT count(*) FROM parked) AS parked, ${WHY_NOT_HELD(wait)} AS not_held`,
    );
    return parkOutcome(row, row?.result ?? null);
  });
}

function parkOutcome(row: (FencedRow & { status: StepStatus | null; wake_at: Date | string | null }) | undefined, result: unknown): ParkOutcome {
  if (!row || row.status === null) return { outcome: notHeld(row) };
  if (row.status === 'completed') return { outcome: 'done', result: typeof result === 'string' ? (JSON.parse(result) as unknown) : result };
  return { outcome: 'parked', wakeAt: row.wake_at == null ? null : new Date(row.wake_at) };
}

/**
 * step.invoke, once the child is enqueued in `tx` (the enqueue pipeline's): the child is made
 * something a job waits for (the `after` machinery), the step records it, and the run parks until
 * the child ends. Fenced: when the run is not held, nothing is written and the caller rolls the
 * child back with its transaction.
 */
export async function parkOnChild(tx: Db, step: StepRecord, childId: string): Promise<ParkOutcome> {
  const [row] = await rowsOf<FencedRow & { status: StepStatus | null }>(
    tx,
    sql`WITH ${RUNNING_HELD(step, 'UPDATE')},
        child AS (SELECT id, status FROM ${jobs} WHERE id = ${childId}::bigint AND EXISTS (SELECT 1 FROM held) FOR UPDATE),
        marked AS (UPDATE ${jobs} c SET has_dependents = true FROM child WHERE c.id = child.id RETURNING 1),
        linked AS (INSERT INTO ${jobDependencies} (depends_on, job_id) SELECT ${childId}::bigint, id FROM held ON CONFLICT DO NOTHING RETURNING 1),
        written AS (
          INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, started_at, child_id)
          SELECT id, ${step.name}, ${step.position}::int, 'waiting', 1, ${step.startedAt.toISOString()}::timestamptz, ${childId}::bigint FROM held
          ON CONFLICT (job_id, name) DO UPDATE SET status = 'waiting', child_id = excluded.child_id, finished_at = NULL, wake_at = NULL
          RETURNING status),
        parked AS (${PARK(sql`1`)} AND EXISTS (SELECT 1 FROM child WHERE status IN ('pending', 'running', 'waiting')) RETURNING 1)
        SELECT (SELECT status FROM written) AS status, (SELECT count(*) FROM parked) AS parked, (SELECT count(*) FROM marked) + (SELECT count(*) FROM linked) AS linked,
               ${WHY_NOT_HELD(step)} AS not_held`,
  );
  if (!row || row.status === null) return { outcome: notHeld(row) };
  return Number((row as { parked?: unknown }).parked) > 0 ? { outcome: 'parked', wakeAt: null } : { outcome: 'done', result: undefined };
}

/** What pgdrain.wake_workflows() did: runs made pending, and the next wake time (null: none). */
export interface WakeResult {
  woken: number;
  nextWakeAt: Date | null;
}

/** Wakes the runs whose sleep ended or whose wait timed out (pgdrain.wake_workflows(), one statement). */
export async function wakeWorkflows(db: Db): Promise<WakeResult> {
  const [row] = await rowsOf<{ woken: number; next_wake_at: Date | string | null }>(db, sql`SELECT * FROM ${sql.raw(PGDRAIN_SCHEMA)}.wake_workflows()`);
  return { woken: Number(row?.woken ?? 0), nextWakeAt: row?.next_wake_at == null ? null : new Date(row.next_wake_at) };
}

/** A scalar subquery: the earliest wake time of a sleeping or waiting step (the clock's business). */
export const NEXT_WAKE_SQL: SQL = sql`(SELECT min(wake_at) FROM ${workflowSteps} WHERE status IN ('sleeping', 'waiting') AND wake_at IS NOT NULL)`;

export interface SentEvent {
  event: string;
  key: string;
  /** JSON text; default `{}`. */
  payloadJson?: string | null;
}

/** pgdrain.send_event() in `db` (your transaction: it wakes its waiters when that commits). Returns the event's id. */
export async function sendEvent(db: Db, event: SentEvent): Promise<string> {
  const [row] = await rowsOf<{ id: string }>(
    db,
    sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.send_event(${event.event}, ${event.key}, coalesce(${event.payloadJson ?? null}::jsonb, '{}'::jsonb))::text AS id`,
  );
  return String(row!.id);
}

/** The CTEs of the housekeeping round's prune for workflows: events past their retention, and the
 * steps of runs that are gone (as `events_pruned`, `steps_pruned`, each at most `batch` rows). */
export function pruneWorkflowsCtes(retentionSeconds: number, batch: number, more: { events: boolean; steps: boolean }): SQL {
  return sql`events_pruned AS (
      DELETE FROM ${workflowEvents} WHERE ${more.events} AND id IN (
        SELECT id FROM ${workflowEvents} WHERE sent_at < now() - make_interval(secs => ${retentionSeconds}::int) ORDER BY sent_at LIMIT ${batch})
      RETURNING 1),
    steps_pruned AS (
      DELETE FROM ${workflowSteps} s WHERE ${more.steps} AND s.job_id IN (
        SELECT o.job_id FROM ${workflowSteps} o
         WHERE o.position = 0 AND NOT EXISTS (SELECT 1 FROM ${jobsAndHistory} j WHERE j.id = o.job_id) LIMIT ${batch})
      RETURNING 1)`;
}
