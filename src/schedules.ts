// Recurring schedules: a cron expression (croner: 5 fields, or 6 with seconds; IANA time zones
// with DST as croner resolves it) that enqueues a job of a kind at each slot. Runtime-neutral:
// the Worker's cron invocation and the sidecar (each minute, at each slot and at start) both call
// evaluateSchedules().
//
// One evaluation of one schedule, in one transaction, under its state row's lock:
//   first evaluation ever ─► nothing due before now (backfillSeconds > 0: the slots of that window)
//   last slot L, clock T  ─► slots in (L, T]: those within backfillSeconds of T are enqueued (with
//                             backfillSeconds = 0, only the latest one); older ones are skipped and
//                             counted; the state row advances to the latest slot ≤ T
// The clock T is the database's now() (or the caller's, for tests), never the runtime's.
import { safeErrorMessage } from './db/url.ts';
import { Cron } from 'croner';
import { KIND_PATTERN, KIND_PATTERN_MESSAGE } from './db/schema.ts';
import { type JobRegistry, JobValidationError } from './jobs/registry.ts';
import { advanceSchedule, type Db, listScheduleStates, lockScheduleState } from './queries/index.ts';
import { prepareEnqueue } from './jobs/enqueue.ts';

export interface ScheduleDefinition {
  /** Unique; the state row's key. 1-100 letters, digits, or _ . : - */
  name: string;
  /** `*\/5 * * * *`, `30 2 * * *`, or 6 fields with seconds first. */
  cron: string;
  /** IANA zone, e.g. Europe/Berlin. Default UTC. */
  timezone?: string;
  kind: string;
  /** Checked against the kind's schema when the drainer starts and at each enqueue. */
  payload: unknown;
  /** After downtime, missed slots within this many seconds before now are enqueued; older ones
   * are skipped and counted. Default 0: only the latest missed slot. */
  backfillSeconds?: number;
  /** Default: the kind's. */
  priority?: number;
  /** Default: the kind's. */
  maxAttempts?: number;
}

/** Counting skipped slots stops here per evaluation (a per-second cron after a long outage). */
const MAX_SLOTS_WALKED = 100_000;
/** At most this many slots are enqueued by one evaluation; the rest of a backfill is skipped. */
export const MAX_BACKFILL_SLOTS = 1_000;

export function defineSchedule(definition: ScheduleDefinition): ScheduleDefinition {
  if (!KIND_PATTERN.test(definition.name)) {
    throw new Error(`schedule name ${JSON.stringify(definition.name)}: ${KIND_PATTERN_MESSAGE}`);
  }
  if (
    definition.backfillSeconds !== undefined &&
    !(definition.backfillSeconds >= 0 && Number.isFinite(definition.backfillSeconds))
  ) {
    throw new Error(`schedule ${definition.name}: backfillSeconds must be a number of seconds, 0 or more`);
  }
  if (definition.timezone !== undefined) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: definition.timezone });
    } catch {
      throw new Error(
        `schedule ${definition.name}: unknown time zone ${JSON.stringify(definition.timezone)}; use an IANA name ` +
          `such as Europe/Berlin`,
      );
    }
  }
  cronOf(definition); // throws on a bad expression
  return definition;
}

function cronOf(schedule: ScheduleDefinition): Cron {
  try {
    return new Cron(schedule.cron, { timezone: schedule.timezone ?? 'UTC', paused: true });
  } catch (error) {
    throw new Error(`schedule ${schedule.name}: ${safeErrorMessage(error)}`);
  }
}

/** Throws unless every schedule names a registered kind with a payload its schema accepts and
 * names are unique: a drainer refuses to start with a schedule that could never enqueue. */
export function checkSchedules(registry: JobRegistry, schedules: readonly ScheduleDefinition[]): void {
  const names = new Set<string>();
  for (const s of schedules) {
    if (names.has(s.name)) throw new Error(`schedule ${s.name} is defined twice`);
    names.add(s.name);
    try {
      registry.prepare({ kind: s.kind, payload: s.payload });
    } catch (error) {
      if (error instanceof JobValidationError) throw new Error(`schedule ${s.name}: ${error.message}`);
      throw error;
    }
  }
}

/** The slots a schedule owes at `now`, given the last one handled. */
export function dueSlots(
  schedule: ScheduleDefinition,
  lastSlot: Date | null,
  now: Date,
): { enqueue: Date[]; skipped: number; latest: Date } {
  const cron = cronOf(schedule);
  const backfillMs = (schedule.backfillSeconds ?? 0) * 1000;
  // croner's previousRuns is exclusive of its reference and works in whole seconds.
  const latest = cron.previousRuns(1, new Date(Math.floor(now.getTime() / 1000) * 1000 + 1000))[0] ?? null;
  if (lastSlot === null) {
    // First evaluation: nothing is owed from before the schedule existed, except its backfill.
    const since = new Date(now.getTime() - backfillMs);
    return {
      enqueue: backfillMs > 0 ? slotsBetween(cron, since, now).slice(-MAX_BACKFILL_SLOTS) : [],
      skipped: 0,
      latest: latest && latest > since ? latest : now,
    };
  }
  if (!latest || latest <= lastSlot) return { enqueue: [], skipped: 0, latest: lastSlot };
  if (backfillMs === 0) return { enqueue: [latest], skipped: countSlots(cron, lastSlot, latest), latest };
  const windowStart = new Date(Math.max(lastSlot.getTime(), now.getTime() - backfillMs));
  const inWindow = slotsBetween(cron, windowStart, now);
  const enqueue = inWindow.slice(-MAX_BACKFILL_SLOTS);
  const beforeWindow = windowStart > lastSlot ? countSlots(cron, lastSlot, new Date(windowStart.getTime() + 1)) : 0;
  return { enqueue, skipped: beforeWindow + (inWindow.length - enqueue.length), latest };
}

/** Slots in (from, to], oldest first. */
function slotsBetween(cron: Cron, from: Date, to: Date): Date[] {
  const out: Date[] = [];
  for (let next = cron.nextRun(from); next && next <= to && out.length < MAX_SLOTS_WALKED; next = cron.nextRun(next))
    out.push(next);
  return out;
}

/** How many slots lie strictly between `from` and `before`. */
function countSlots(cron: Cron, from: Date, before: Date): number {
  let n = 0;
  for (let next = cron.nextRun(from); next && next < before && n < MAX_SLOTS_WALKED; next = cron.nextRun(next)) n++;
  return n;
}

export interface ScheduleReport {
  name: string;
  enqueued: number;
  skipped: number;
}

/**
 * Enqueues what each schedule owes, each in its own transaction under its state row's lock, so any
 * number of concurrent evaluators enqueue each slot exactly once. `now` replaces the database's
 * clock (tests).
 */
export async function evaluateSchedules(
  db: Db,
  registry: JobRegistry,
  schedules: readonly ScheduleDefinition[],
  options: { now?: Date } = {},
): Promise<ScheduleReport[]> {
  const reports: ScheduleReport[] = [];
  // Always in name order, so two evaluators never wait on each other's locks in a cycle.
  for (const schedule of [...schedules].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    reports.push(
      await db.transaction(async (tx) => {
        const state = await lockScheduleState(tx, schedule.name);
        const now = options.now ?? state.databaseNow;
        const due = dueSlots(schedule, state.lastSlot, now);
        if (due.enqueue.length > 0) {
          const { kind, payload, maxAttempts, priority } = schedule;
          await prepareEnqueue(
            due.enqueue.map((runAt) => ({ kind, payload, maxAttempts, priority, runAt })),
            { registry, unknownKinds: 'refuse' },
          ).send(tx);
        }
        if (state.lastSlot === null || due.latest > state.lastSlot) {
          await advanceSchedule(tx, schedule.name, due.latest, due.skipped, due.enqueue.at(-1) ?? null);
        }
        return { name: schedule.name, enqueued: due.enqueue.length, skipped: due.skipped };
      }),
    );
  }
  return reports;
}

export interface ScheduleView {
  name: string;
  cron: string;
  timezone: string;
  kind: string;
  nextRunAt: string | null;
  /** The last slot a job was enqueued for; null: never (a schedule's first evaluation enqueues
   * nothing from before it existed). */
  lastRunAt: string | null;
}

/** What GET /schedules shows: each schedule in code, its next slot and the last one enqueued. */
export async function describeSchedules(
  db: Db,
  schedules: readonly ScheduleDefinition[],
  now = new Date(),
): Promise<ScheduleView[]> {
  const states = schedules.length === 0 ? new Map() : await listScheduleStates(db);
  return schedules.map((s) => ({
    name: s.name,
    cron: s.cron,
    timezone: s.timezone ?? 'UTC',
    kind: s.kind,
    nextRunAt: cronOf(s).nextRun(now)?.toISOString() ?? null,
    lastRunAt: states.get(s.name)?.lastEnqueuedSlot?.toISOString() ?? null,
  }));
}

/** Milliseconds until the soonest next slot of any schedule (for the sidecar's timer). */
export function msUntilNextSlot(schedules: readonly ScheduleDefinition[], now = new Date()): number | null {
  let soonest: number | null = null;
  for (const s of schedules) {
    const next = cronOf(s).nextRun(now);
    if (next && (soonest === null || next.getTime() < soonest)) soonest = next.getTime();
  }
  return soonest === null ? null : Math.max(0, soonest - now.getTime());
}
