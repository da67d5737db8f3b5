// The sidecar's recurring schedules: evaluated at start, then at the soonest next slot (at least
// every minute), each evaluation enqueueing what is due (src/schedules.ts). Schedules enqueue, so
// they run on the durable pool, never the drainer's asynchronous-commit one.
import type { Logger } from 'pino';
import type { JobRegistry } from '../jobs/registry.ts';
import type { Db } from '../queries/index.ts';
import { type ScheduleDefinition, evaluateSchedules, msUntilNextSlot } from '../schedules.ts';
import type { Incidents } from './incidents.ts';

/** Evaluations happen at least this often, whatever the schedules' slots. */
const MAX_WAIT_MS = 60_000;
/** An evaluation waits this long after a slot, so the database's clock has reached it too. */
const AFTER_SLOT_MS = 50;

export class Scheduler {
  readonly #db: Db;
  readonly #registry: JobRegistry;
  readonly #schedules: readonly ScheduleDefinition[];
  readonly #log: Logger;
  readonly #incidents: Incidents;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #evaluating: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(
    db: Db,
    registry: JobRegistry,
    schedules: readonly ScheduleDefinition[],
    log: Logger,
    incidents: Incidents,
  ) {
    this.#db = db;
    this.#registry = registry;
    this.#schedules = schedules;
    this.#log = log;
    this.#incidents = incidents;
  }

  start(): this {
    if (this.#schedules.length > 0) void this.runOnce();
    return this;
  }

  /** One evaluation, then the timer for the next; never rejects. */
  runOnce(): Promise<void> {
    this.#evaluating = this.#evaluate().finally(() => {
      if (this.#stopped) return;
      const wait = Math.min(MAX_WAIT_MS, (msUntilNextSlot(this.#schedules) ?? MAX_WAIT_MS) + AFTER_SLOT_MS);
      this.#timer = setTimeout(() => void this.runOnce(), wait);
    });
    return this.#evaluating;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#evaluating;
  }

  async #evaluate(): Promise<void> {
    try {
      const reports = await evaluateSchedules(this.#db, this.#registry, this.#schedules);
      this.#incidents.end('schedules');
      for (const r of reports) {
        if (r.skipped > 0)
          this.#log.warn(
            { schedule: r.name, enqueued: r.enqueued, skipped: r.skipped },
            'schedule: missed slots beyond its backfill window were skipped',
          );
        else if (r.enqueued > 0) this.#log.debug({ schedule: r.name, enqueued: r.enqueued }, 'schedule: enqueued');
      }
    } catch (error) {
      this.#incidents.start('schedules', error);
    }
  }
}
