// workflows: the statements of durable workflows (src/workflows/) — a run's stored steps, a step's
// record, the parks (a sleep, a wait for an event, a child), and events.
//
// Every write a run makes is fenced like a settlement (fence.ts): it happens only while the job is
// still running under the lock token of the claim that started this attempt. A statement that
// finds the job not held says why — its lease was lost, or someone asked to cancel it — and writes
// nothing. The hot ones are SQL functions (pgdrain.record_step(), park_sleep(), park_wait(), …:
// src/sql/functions/), planned once per connection: a step's statement planned afresh
// each time cost more than running it.
//
// A park ends the attempt without spending one (its lock cleared, its attempt refunded), and the
// step row says until when or for what. It is a snooze, as a retry's backoff is:
//   sleeping                  the job is `pending` with run_at at the sleep's end: the claim then
//                             re-enters the run, and the sleep's step completes
//   waiting for an event      `waiting` (with a timeout: `pending` until it, as a sleep), made due by
//                             pgdrain.send_event() in the sender's transaction
//   waiting for a child       `waiting`, until the child's end (job-ended.ts: the `after` machinery)
import { type SQL, sql } from 'drizzle-orm';
import {
  PGDRAIN_SCHEMA,
  cancelTriggers,
  jobDependencies,
  jobs,
  jobsAndHistory,
  workflowEvents,
  workflowSteps,
} from '../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf, rowsOfPrepared } from './db.ts';

/** A run's attempt, as its drainer holds it. */
export interface HeldRun {
  jobId: string;
  lockedBy: string;
}

/** Why a fenced write wrote nothing. */
export type NotHeld = 'lost' | 'cancelled';

export type StepStatus = 'completed' | 'failed' | 'sleeping' | 'waiting';

/** What the run called for a step, as its record keeps it: a replay that calls a recorded name as
 * another type has diverged (sleep and sleepUntil are one). */
export type StepType = 'run' | 'sleep' | 'sleepUntil' | 'waitForEvent' | 'invoke' | 'patched';

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
  /** A wait's match (an object the event's payload must contain); null: any event of its name and key. */
  eventMatch: unknown;
  eventId: string | null;
  childId: string | null;
  /** step.invoke: the child's kind, status and outcome (null: it is gone). */
  child: { kind: string; status: string; result: unknown; lastError: string | null } | null;
  /** What the run called (null: recorded before types were, by wave 5). */
  type: StepType | null;
  /** A sleep whose end came by this attempt's read of its steps, which completed it (loadStepsOfAttempts). */
  endedInRead?: true;
}

/** The run's job, locked, while it is still running under the attempt's token and nobody asked to cancel it. */
const RUNNING_HELD = (run: HeldRun) =>
  sql`held AS MATERIALIZED (SELECT id, created_at FROM ${jobs}
        WHERE id = ${run.jobId}::bigint AND locked_by = ${run.lockedBy} AND status = 'running'
          AND cancel_requested_at IS NULL
        FOR UPDATE)`;

/** Why `held` came back empty (evaluated only then). */
const WHY_NOT_HELD = (run: HeldRun) =>
  sql`(SELECT CASE WHEN locked_by = ${run.lockedBy} AND cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'lost' END
         FROM ${jobs} WHERE id = ${run.jobId}::bigint AND NOT EXISTS (SELECT 1 FROM held))`;

interface FencedRow {
  not_held: NotHeld | null;
}

const notHeld = (row: FencedRow | undefined): NotHeld => row?.not_held ?? 'lost';

/** Every step the run has reached, in the order it first reached them; for step.invoke's steps,
 * their child's end (a second read, only when the run has any: the history view costs planning).
 * `held`: the attempt that reads them to go on: see loadStepsOfAttempts. */
export async function loadSteps(db: Db, jobId: string, held?: HeldRun): Promise<StoredStep[]> {
  if (held) return (await loadStepsOfAttempts(db, [held])).get(held.jobId) ?? [];
  // Prepared: planning this read took twice as long as running it, once for every attempt of a run.
  const rows = await rowsOfPrepared<Record<string, unknown>>(
    db,
    'pgdrain_load_steps',
    sql`SELECT name, position, status, attempts, result::text AS result, error, started_at, finished_at, wake_at,
      event, event_key, event_match::text AS event_match, event_id::text AS event_id, child_id::text AS child_id, type
          FROM ${workflowSteps} WHERE job_id = ${jobId}::bigint ORDER BY position`,
  );
  return (await withChildren(db, rows)).map(stepFromRow);
}

/**
 * The stored steps of runs about to go on, each held by its attempt, in one statement: a drain
 * reads those of the runs a claim returned at once, where each run read its own (a round trip per
 * run). Runs with no step get an empty list.
 *
 * Their sleeps whose end has come complete in the same statement (fenced: only while the attempt
 * holds the job), as pgdrain.park_sleep() would complete each when the run reaches it again: a run
 * woken from a sleep passes it with no statement of its own. A sleep's end is fixed at its first
 * park and time only goes on, so completing it before the run reaches it decides nothing the run
 * would decide otherwise.
 */
export async function loadStepsOfAttempts(db: Db, runs: readonly HeldRun[]): Promise<Map<string, StoredStep[]>> {
  const ids = runs.map((r) => r.jobId);
  const rows = await rowsOfPrepared<Record<string, unknown>>(
    db,
    'pgdrain_load_attempt_steps',
    sql`WITH runs AS (
        SELECT * FROM unnest(${sql.param(ids)}::bigint[], ${sql.param(runs.map((r) => r.lockedBy))}::text[])
          AS r(id, token)),
      ended AS (
        UPDATE ${workflowSteps} s SET status = 'completed', finished_at = now(), wake_at = NULL
          FROM runs r JOIN ${jobs} j ON j.id = r.id AND j.locked_by = r.token AND j.status = 'running'
         WHERE s.job_id = r.id AND s.status = 'sleeping' AND s.wake_at <= now()
        RETURNING s.job_id, s.name, s.finished_at)
      SELECT s.job_id::text AS job_id, s.name, s.position,
             CASE WHEN e.name IS NULL THEN s.status ELSE 'completed' END AS status,
             s.attempts, s.result::text AS result, s.error, s.started_at,
             coalesce(e.finished_at, s.finished_at) AS finished_at,
             CASE WHEN e.name IS NULL THEN s.wake_at END AS wake_at,
             s.event, s.event_key, s.event_match::text AS event_match, s.event_id::text AS event_id,
             s.child_id::text AS child_id, e.name IS NOT NULL AS ended_in_read, s.type
        FROM ${workflowSteps} s LEFT JOIN ended e ON e.job_id = s.job_id AND e.name = s.name
       WHERE s.job_id = ANY(${sql.param(ids)}::bigint[])
       ORDER BY s.job_id, s.position`,
  );
  const byRun = new Map<string, StoredStep[]>(ids.map((id) => [id, []]));
  for (const row of await withChildren(db, rows)) byRun.get(String(row.job_id))?.push(stepFromRow(row));
  return byRun;
}

/** A run in flight, as a pre-deploy check replays it (checkWorkflows). */
export interface RunInFlight {
  id: string;
  kind: string;
  version: number | null;
  status: string;
  payload: unknown;
  /** Why it is held, when a change of its code holds it. */
  held: unknown;
  steps: StoredStep[];
}

/** A page of the runs of `kinds` that are not over (pending, running, waiting; held ones are
 * waiting), after id `after`, oldest first, with their stored steps: two statements a page. */
export async function runsInFlight(
  db: Db,
  kinds: readonly string[],
  after: string | null,
  limit: number,
): Promise<RunInFlight[]> {
  const runs = await rowsOf<Omit<RunInFlight, 'steps'>>(
    db,
    // Ordered by the column, not the text it is read as ('10' < '9'): the pages would skip runs.
    sql`SELECT j.id::text AS id, j.kind, j.version, j.status, j.payload, j.held FROM ${jobs} j
         WHERE j.kind = ANY(${sql.param(kinds)}::text[]) AND j.status IN ('pending', 'running', 'waiting')
           AND j.id > ${after ?? '0'}::bigint
         ORDER BY j.id LIMIT ${limit}`,
  );
  if (runs.length === 0) return [];
  const rows = await rowsOf<Record<string, unknown>>(
    db,
    sql`SELECT job_id::text AS job_id, name, position, status, attempts, result::text AS result, error, started_at,
               finished_at, wake_at, event, event_key, event_match::text AS event_match, event_id::text AS event_id,
               child_id::text AS child_id, type
          FROM ${workflowSteps} WHERE job_id = ANY(${sql.param(runs.map((r) => r.id))}::bigint[])
         ORDER BY job_id, position`,
  );
  const byRun = new Map<string, StoredStep[]>(runs.map((r) => [r.id, []]));
  for (const row of await withChildren(db, rows)) byRun.get(String(row.job_id))?.push(stepFromRow(row));
  return runs.map((r) => ({ ...r, steps: byRun.get(r.id) ?? [] }));
}

/** Rows of steps, those of step.invoke's steps with their child's status and outcome. */
async function withChildren(db: Db, rows: Record<string, unknown>[]): Promise<Record<string, unknown>[]> {
  const childIds = rows.map((r) => r.child_id).filter((id): id is string => typeof id === 'string');
  if (childIds.length > 0) {
    const children = await rowsOf<{
      id: string;
      kind: string;
      status: string;
      result: unknown;
      last_error: string | null;
    }>(
      db,
      sql`SELECT id::text AS id, kind, status, result::text AS result, last_error FROM ${jobsAndHistory}
        WHERE id = ANY(${sql.param(childIds)}::bigint[])`,
    );
    const byId = new Map(children.map((c) => [String(c.id), c]));
    for (const r of rows) {
      const child = typeof r.child_id === 'string' ? byId.get(r.child_id) : undefined;
      if (child)
        Object.assign(r, {
          child_kind: child.kind,
          child_status: child.status,
          child_result: child.result,
          child_error: child.last_error,
        });
    }
  }
  return rows;
}

function stepFromRow(r: Record<string, unknown>): StoredStep {
  const date = (v: unknown) => (v == null ? null : v instanceof Date ? v : new Date(v as string));
  // JSON comes back as its text (`::text` above) and is parsed here, once: a driver that parses
  // jsonb itself would hand back a JSON string as a bare string, which a second parse breaks.
  const json = (v: unknown) => JSON.parse(v as string) as unknown;
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
    eventMatch: r.event_match == null ? null : json(r.event_match),
    eventId: (r.event_id as string | null) ?? null,
    childId: (r.child_id as string | null) ?? null,
    child:
      r.child_status == null
        ? null
        : {
            kind: r.child_kind as string,
            status: r.child_status as string,
            result: r.child_result == null ? undefined : json(r.child_result),
            lastError: (r.child_error as string | null) ?? null,
          },
    type: (r.type as StepType | null) ?? null,
    ...(r.ended_in_read === true ? { endedInRead: true as const } : {}),
  };
}

export interface StepRecord extends HeldRun {
  name: string;
  position: number;
  /** What the run called (kept with the record the first time it is written). */
  stepType: StepType;
  startedAt: Date;
  /** Runs of it before this one (failed). */
  priorAttempts: number;
}

/** The step completed: its result stored (JSON text, or null for undefined). Fenced (pgdrain.record_step());
 * `transactional`: in the step's own transaction, the job's row share-locked until it commits (the
 * reaper cannot take it back between the fence and the commit, so nobody runs the step again meanwhile). */
export async function recordStepCompleted(
  db: Db,
  step: StepRecord,
  resultJson: string | null,
  { transactional = false } = {},
): Promise<NotHeld | null> {
  return recordStep(db, step, 'completed', resultJson, null, transactional);
}

/** The step threw: its error and attempts stored (it runs again at the job's next attempt). Fenced. */
export async function recordStepFailed(db: Db, step: StepRecord, error: string): Promise<void> {
  await recordStep(db, step, 'failed', null, error, false);
}

/** A completed step's record and its result (JSON text, or null for undefined), for recordStepsCompleted. */
export interface CompletedStep {
  step: StepRecord;
  resultJson: string | null;
}

/**
 * Completed steps' records, of any runs, in one statement and one durable commit
 * (pgdrain.record_steps()): each fenced as recordStepCompleted's, its outcome at its index. The
 * records must name distinct steps (one row cannot be written twice in a statement).
 */
export async function recordStepsCompleted(db: Db, records: readonly CompletedStep[]): Promise<(NotHeld | null)[]> {
  const column = <T>(of: (r: CompletedStep) => T) => sql.param(records.map(of));
  const rows = await rowsOfPrepared<{ step_index: number; outcome: 'written' | NotHeld }>(
    db,
    'pgdrain_record_steps',
    sql`SELECT step_index, outcome FROM ${sql.raw(PGDRAIN_SCHEMA)}.record_steps(
          ${column((r) => r.step.jobId)}::bigint[], ${column((r) => r.step.lockedBy)}::text[],
          ${column((r) => r.step.name)}::text[], ${column((r) => r.step.position)}::int[],
          ${column((r) => r.step.priorAttempts + 1)}::int[], ${column((r) => r.resultJson)}::text[],
          ${column((r) => r.step.startedAt.toISOString())}::timestamptz[], ${column((r) => r.step.stepType)}::text[])`,
  );
  const outcomes: (NotHeld | null)[] = records.map(() => 'lost');
  for (const row of rows) outcomes[row.step_index - 1] = row.outcome === 'written' ? null : row.outcome;
  return outcomes;
}

async function recordStep(
  db: Db,
  step: StepRecord,
  status: 'completed' | 'failed',
  resultJson: string | null,
  error: string | null,
  shareLock: boolean,
): Promise<NotHeld | null> {
  // Prepared, as the parks: every step sends it, and its parse and plan cost PostgreSQL about what
  // running it does.
  const [row] = await rowsOfPrepared<{ outcome: 'written' | NotHeld }>(
    db,
    'pgdrain_record_step',
    sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.record_step(
          ${step.jobId}::bigint, ${step.lockedBy}, ${step.name}, ${step.position}::int, ${status},
          ${step.priorAttempts + 1}::int, ${resultJson}::jsonb, ${error},
          ${step.startedAt.toISOString()}::timestamptz, ${shareLock}, ${step.stepType}) AS outcome`,
  );
  return row?.outcome === 'written' ? null : (row?.outcome ?? 'lost');
}

/** What a park did: `parked` (the job waits now), `done` (nothing to wait for: the step completed,
 * with `result` for a wait), or why the job was not held. */
export type ParkOutcome =
  | { outcome: 'parked'; wakeAt: Date | null }
  | { outcome: 'done'; result: unknown }
  | { outcome: NotHeld };

/**
 * step.sleep: parks the run until `until` (kept from a first park: a sleep's end does not move when
 * the run is re-entered), or, when that time has come, completes the step. Fenced
 * (pgdrain.park_sleep()).
 */
export async function parkSleep(db: Db, step: StepRecord, until: Date): Promise<ParkOutcome> {
  const [row] = await rowsOfPrepared<ParkRow>(
    db,
    'pgdrain_park_sleep',
    sql`SELECT outcome, until_at
      FROM ${sql.raw(PGDRAIN_SCHEMA)}.park_sleep(
             ${step.jobId}::bigint, ${step.lockedBy}, ${step.name}, ${step.position}::int,
             ${step.startedAt.toISOString()}::timestamptz, ${until.toISOString()}::timestamptz, ${step.stepType})`,
  );
  return parkOutcome(row);
}

export interface EventWait extends StepRecord {
  event: string;
  key: string;
  /** The wait's timeout (from its first park); null: none. */
  until: Date | null;
  /** JSON text of an object the event's payload must contain; null: any. */
  matchJson: string | null;
}

/**
 * step.waitForEvent: the first event of this name and key sent since the run was enqueued that no
 * earlier wait of the run took answers it at once; none: the run parks until one is sent (or its
 * timeout, when the step completes with null). Under the event's lock (pgdrain.send_event() takes
 * it too), so an event sent meanwhile is either seen here or sees the park. Fenced
 * (pgdrain.park_wait()).
 */
export async function waitForEvent(db: Db, wait: EventWait): Promise<ParkOutcome> {
  const [row] = await rowsOf<ParkRow>(
    db,
    sql`SELECT outcome, until_at, answer::text AS answer
      FROM ${sql.raw(PGDRAIN_SCHEMA)}.park_wait(
             ${wait.jobId}::bigint, ${wait.lockedBy}, ${wait.name}, ${wait.position}::int,
             ${wait.startedAt.toISOString()}::timestamptz, ${wait.event}, ${wait.key},
             ${wait.until?.toISOString() ?? null}::timestamptz, ${wait.matchJson}::jsonb)`,
  );
  return parkOutcome(row);
}

interface ParkRow {
  outcome: 'parked' | 'done' | NotHeld;
  until_at: Date | string | null;
  /** The step's answer as JSON text (park_wait's event payload); null when it has none. */
  answer?: string | null;
}

function parkOutcome(row: ParkRow | undefined): ParkOutcome {
  if (!row) return { outcome: 'lost' };
  if (row.outcome === 'lost' || row.outcome === 'cancelled') return { outcome: row.outcome };
  if (row.outcome === 'done')
    return { outcome: 'done', result: row.answer == null ? null : (JSON.parse(row.answer) as unknown) };
  return { outcome: 'parked', wakeAt: row.until_at == null ? null : new Date(row.until_at) };
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
    sql`WITH ${RUNNING_HELD(step)},
        child AS (SELECT id, status FROM ${jobs} WHERE id = ${childId}::bigint AND EXISTS (SELECT 1 FROM held)
          FOR UPDATE),
        marked AS (UPDATE ${jobs} c SET has_dependents = true FROM child WHERE c.id = child.id RETURNING 1),
        linked AS (INSERT INTO ${jobDependencies} (depends_on, job_id) SELECT ${childId}::bigint, id FROM held
          ON CONFLICT DO NOTHING RETURNING 1),
        written AS (
          INSERT INTO ${workflowSteps} (job_id, name, position, status, attempts, started_at, child_id, type)
          SELECT id, ${step.name}, ${step.position}::int, 'waiting',
            1, ${step.startedAt.toISOString()}::timestamptz, ${childId}::bigint, 'invoke' FROM held
          ON CONFLICT (job_id, name) DO UPDATE SET status = 'waiting', child_id = excluded.child_id,
            finished_at = NULL, wake_at = NULL, type = coalesce(${workflowSteps}.type, excluded.type)
          RETURNING status),
        -- The parent leaves running for waiting (on one job), its attempt refunded, while its child may still end.
        parked AS (
          UPDATE ${jobs} j SET status = 'waiting', waiting_for = 1, locked_at = NULL, locked_by = NULL,
            locked_until = NULL, attempts = greatest(j.attempts - 1, 0)
            FROM held WHERE j.id = held.id
              AND EXISTS (SELECT 1 FROM child WHERE status IN ('pending', 'running', 'waiting'))
          RETURNING 1)
        SELECT (SELECT status FROM written) AS status, (SELECT count(*) FROM parked) AS parked,
          (SELECT count(*) FROM marked) + (SELECT count(*) FROM linked) AS linked,
               ${WHY_NOT_HELD(step)} AS not_held`,
  );
  if (!row || row.status === null) return { outcome: notHeld(row) };
  return Number((row as { parked?: unknown }).parked) > 0
    ? { outcome: 'parked', wakeAt: null }
    : { outcome: 'done', result: undefined };
}

/** A step's failure to record with a snooze: its tries so far, its error. */
export interface FailedTry {
  step: StepRecord;
  attempts: number;
  error: string;
}

/**
 * Ends the attempt with a snooze until `until` (pgdrain.snooze_run(), fenced): the job pending then,
 * its attempt refunded. With `failed`, the step's failure is recorded in the same statement (a step's
 * own retry: its next try at `until`). Returns null, or why the job was not held.
 */
export async function snoozeRun(db: Db, run: HeldRun, until: Date, failed?: FailedTry): Promise<NotHeld | null> {
  const step = failed?.step;
  const [row] = await rowsOf<{ outcome: 'parked' | NotHeld }>(
    db,
    sql`SELECT outcome
      FROM ${sql.raw(PGDRAIN_SCHEMA)}.snooze_run(
             ${run.jobId}::bigint, ${run.lockedBy}, ${until.toISOString()}::timestamptz,
             ${step?.name ?? null}, ${step?.position ?? null}::int,
             ${step?.startedAt.toISOString() ?? null}::timestamptz,
             ${failed?.attempts ?? null}::int, ${failed?.error ?? null})`,
  );
  return row?.outcome === 'parked' ? null : (row?.outcome ?? 'lost');
}

/** One of the parks an attempt makes at once (pgdrain.park_steps()). */
export type StepPark = StepRecord &
  (
    | { type: 'sleep'; until: Date }
    | { type: 'wait'; event: string; key: string; until: Date | null; matchJson: string | null }
    | { type: 'child'; childId: string }
  );

/** What pgdrain.park_steps() did with each park, by step name: `parked`, or `done` (a sleep that
 * ended, a wait answered (`result`), a child that has ended); or why the job was not held. */
export type StepParksOutcome =
  | { outcome: 'recorded'; parked: boolean; steps: Map<string, ParkOutcome> }
  | { outcome: NotHeld };

/**
 * The parks of one attempt at once (Promise.all over sleeps, waits and children), in one statement:
 * each recorded as parkSleep, waitForEvent and parkOnChild record theirs, and, if any parked, the
 * attempt ended once — pending until the earliest sleep's end or wait's timeout, else waiting for
 * the first child to end or an event (pgdrain.park_steps(), fenced). Children are enqueued by the
 * caller in the same transaction `db`.
 */
export async function parkSteps(db: Db, run: HeldRun, parks: readonly StepPark[]): Promise<StepParksOutcome> {
  const json = JSON.stringify(
    parks.map((p) => ({
      type: p.type,
      step_type: p.stepType,
      name: p.name,
      position: p.position,
      started_at: p.startedAt.toISOString(),
      ...(p.type === 'sleep' ? { until: p.until.toISOString() } : {}),
      ...(p.type === 'wait'
        ? {
            event: p.event,
            key: p.key,
            until: p.until?.toISOString() ?? null,
            match: p.matchJson === null ? null : JSON.parse(p.matchJson),
          }
        : {}),
      ...(p.type === 'child' ? { child_id: p.childId } : {}),
    })),
  );
  const rows = await rowsOf<ParkRow & { name: string | null }>(
    db,
    sql`SELECT name, outcome, until_at, answer::text AS answer
      FROM ${sql.raw(PGDRAIN_SCHEMA)}.park_steps(${run.jobId}::bigint, ${run.lockedBy}, ${json}::jsonb)`,
  );
  const first = rows[0];
  if (!first || first.name === null) return { outcome: first?.outcome === 'cancelled' ? 'cancelled' : 'lost' };
  const steps = new Map(rows.map((r) => [r.name!, parkOutcome(r)]));
  return { outcome: 'recorded', parked: rows.some((r) => r.outcome === 'parked'), steps };
}

/**
 * pgdrain/testing's virtual clock: the run's next moment — a sleep's end, a wait's timeout, a
 * step's next try — brought to now, the job due at once, and its later moments as far forward.
 * Returns how far ahead that moment was (ms; 0 when the run was not snoozed). Not for production:
 * the moments are the run's own record.
 */
export async function skipRunAhead(db: Db, jobId: string): Promise<number> {
  const [row] = await rowsOf<{ ahead_ms: number | string | null }>(
    db,
    sql`WITH due AS (
          UPDATE ${jobs} j SET run_at = now()
            FROM (SELECT id, run_at AS was FROM ${jobs} WHERE id = ${jobId}::bigint FOR UPDATE) o
           WHERE j.id = o.id AND j.status = 'pending' AND o.was > now()
          RETURNING extract(epoch from o.was - now()) * 1000 AS ahead_ms),
        -- Every moment of the run moves by the same span: a later sleep keeps its distance.
        steps AS (
          UPDATE ${workflowSteps} SET wake_at =
            greatest(now(), wake_at - make_interval(secs => (SELECT ahead_ms FROM due) / 1000))
           WHERE job_id = ${jobId}::bigint AND wake_at > now() AND EXISTS (SELECT 1 FROM due)
          RETURNING 1)
        SELECT (SELECT ahead_ms FROM due) AS ahead_ms, (SELECT count(*) FROM steps) AS moved`,
  );
  return Number(row?.ahead_ms ?? 0);
}

/** An event and key that cancels a workflow run (defineWorkflow cancelOn). */
export interface CancelTrigger {
  event: string;
  key: string;
}

/**
 * Lists the run for cancellation by each trigger's event (pgdrain.send_event() cancels what is
 * listed), under each event's lock — the lock send_event takes —, and says whether such an event
 * was already sent since the run was enqueued (then the caller cancels the run). Idempotent.
 */
export async function registerCancelTriggers(
  db: Db,
  jobId: string,
  triggers: readonly CancelTrigger[],
): Promise<boolean> {
  const events = triggers.map((t) => t.event);
  const keys = triggers.map((t) => t.key);
  return db.transaction(async (tx) => {
    await rowsOf(
      tx as unknown as Db,
      sql`SELECT pg_advisory_xact_lock(hashtextextended('pgdrain.event:' || s.e || ':' || s.k, 0)) AS locked
            FROM (SELECT DISTINCT e, k
              FROM unnest(${sql.param(events)}::text[], ${sql.param(keys)}::text[]) AS t(e, k) ORDER BY e, k) s`,
    );
    const [row] = await rowsOf<{ sent: boolean }>(
      tx as unknown as Db,
      sql`WITH pairs AS
        (SELECT DISTINCT e, k FROM unnest(${sql.param(events)}::text[], ${sql.param(keys)}::text[]) AS t(e, k)),
          written AS (
            INSERT INTO ${cancelTriggers} (event, event_key, job_id) SELECT e, k, ${jobId}::bigint FROM pairs
            ON CONFLICT DO NOTHING RETURNING 1)
          SELECT EXISTS (
            SELECT 1 FROM pairs JOIN ${workflowEvents} ev ON ev.event = pairs.e AND ev.event_key = pairs.k
             WHERE ev.sent_at >= (SELECT created_at FROM ${jobs} WHERE id = ${jobId}::bigint)) AS sent,
            (SELECT count(*) FROM written) AS written`,
    );
    return row?.sent === true;
  });
}

export interface SentEvent {
  event: string;
  key: string;
  /** JSON text; default `{}`. */
  payloadJson?: string | null;
  /** Its sender's id: a repeat of the event's name and id, while the first is kept, sends nothing. */
  id?: string;
}

/** pgdrain.send_event() in `db` (your transaction: it wakes its waiters when that commits). Returns the event's id
 * (a repeat of a sender's id: the first's). */
export async function sendEvent(db: Db, event: SentEvent): Promise<string> {
  const [row] = await rowsOf<{ id: string }>(
    db,
    sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.send_event(${event.event}, ${event.key},
      coalesce(${event.payloadJson ?? null}::jsonb, '{}'::jsonb), ${event.id ?? null}::text)::text AS id`,
  );
  return String(row!.id);
}

/** The CTEs of the housekeeping round's prune for workflows: events past their retention, and the
 * steps of runs that are gone (as `events_pruned`, `steps_pruned`, each at most `batch` rows). */
export function pruneWorkflowsCtes(
  retentionSeconds: number,
  batch: number,
  more: { events: boolean; steps: boolean },
): SQL {
  return sql`events_pruned AS (
      DELETE FROM ${workflowEvents} WHERE ${more.events} AND id IN (
        SELECT id FROM ${workflowEvents} WHERE sent_at < now() - make_interval(secs => ${retentionSeconds}::int)
          ORDER BY sent_at LIMIT ${batch})
      RETURNING 1),
    cancel_triggers_pruned AS (
      DELETE FROM ${cancelTriggers} t WHERE ${more.steps} AND (t.event, t.event_key, t.job_id) IN (
        SELECT o.event, o.event_key, o.job_id FROM ${cancelTriggers} o
         WHERE NOT EXISTS
           (SELECT 1 FROM ${jobs} j WHERE j.id = o.job_id AND j.status IN ('pending', 'running', 'waiting'))
             LIMIT ${batch})
      RETURNING 1),
    steps_pruned AS (
      DELETE FROM ${workflowSteps} s WHERE ${more.steps} AND s.job_id IN (
        SELECT o.job_id FROM ${workflowSteps} o
         WHERE o.position = 0 AND NOT EXISTS (SELECT 1 FROM ${jobsAndHistory} j WHERE j.id = o.job_id) LIMIT ${batch})
      RETURNING 1)`;
}

/** Holds a run whose code no longer matches its history (pgdrain.hold_run(), fenced): `waiting`, not
 * claimed, `held` saying why, its attempt refunded. Returns null, or why the job was not held. */
export async function holdRun(db: Db, run: HeldRun, held: object): Promise<NotHeld | null> {
  const [row] = await rowsOf<{ outcome: 'held' | NotHeld }>(
    db,
    sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.hold_run(${run.jobId}::bigint, ${run.lockedBy},
          ${JSON.stringify({ ...held, at: new Date().toISOString() })}::jsonb) AS outcome`,
  );
  return row?.outcome === 'held' ? null : (row?.outcome ?? 'lost');
}

/**
 * Lets the held runs of `kinds` replay (a drainer that has them starts: a deploy): pending again,
 * `held` cleared, their drainers notified. A run that still departs from its history is held
 * again at its next attempt, which ran nothing, so each start costs such a run one replay. Returns
 * how many runs of each kind it let go.
 */
export async function releaseHeldRuns(db: Db, kinds: readonly string[]): Promise<Record<string, number>> {
  if (kinds.length === 0) return {};
  const rows = await rowsOf<{ kind: string; n: number }>(
    db,
    sql`WITH released AS (
          UPDATE ${jobs} SET status = 'pending', held = NULL, run_at = now()
           WHERE status = 'waiting' AND held IS NOT NULL AND kind = ANY(${sql.param(kinds)}::text[])
          RETURNING kind)
        SELECT kind, count(*)::int AS n, pg_notify(${NOTIFY_CHANNEL}, kind) AS notified FROM released GROUP BY kind`,
  );
  return Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
}

/**
 * Replays the parked runs of the given kinds' versions once (a deploy changed their code): runs
 * waiting for an event, and runs pending on a sleep or a timed wait, become due now. A run whose new
 * code fits its history parks again where it was (a sleep's end and a wait's timeout are kept from
 * its first park); one whose code departs from it is held at once, instead of when its event comes.
 * Runs waiting for a child replay when it ends. Returns how many runs of each kind.
 */
export async function replayParkedRuns(
  db: Db,
  changed: readonly { kind: string; versions: readonly number[] }[],
): Promise<Record<string, number>> {
  if (changed.length === 0) return {};
  const names = changed.flatMap((c) => c.versions.map((v) => `${c.kind}@${v}`));
  const rows = await rowsOf<{ kind: string; n: number }>(
    db,
    sql`WITH replayed AS (
          UPDATE ${jobs} j SET status = 'pending', run_at = now()
           WHERE (j.kind || '@' || coalesce(j.version, 1)) = ANY(${sql.param(names)}::text[])
             AND j.held IS NULL
             AND (j.status = 'waiting' AND j.waiting_for IS NULL OR j.status = 'pending' AND j.run_at > now())
             AND EXISTS (SELECT 1 FROM ${workflowSteps} s WHERE s.job_id = j.id AND s.status IN ('sleeping', 'waiting')
                           AND s.child_id IS NULL)
          RETURNING j.kind)
        SELECT kind, count(*)::int AS n, pg_notify(${NOTIFY_CHANNEL}, kind) AS notified FROM replayed GROUP BY kind`,
  );
  return Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
}
