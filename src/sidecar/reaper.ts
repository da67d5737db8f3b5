// The sidecar's housekeeping on a timer (runtime/core.ts, the round the Worker's crons run too:
// returns jobs whose lease ran out, folds old per-minute counts into the totals, prunes kept jobs
// whose time is up). runOnce() is one round; start() runs one at once (a previous process may have
// died holding locks) and then every `intervalMs`.
import type { Logger } from 'pino';
import type { Db } from '../queries/index.ts';
import { housekeepingRound } from '../runtime/core.ts';
import type { Settings } from '../settings.ts';
import type { Incidents } from './incidents.ts';

export interface ReaperOptions {
  intervalMs: number;
  /** The sidecar's settings: the visibility timeout of jobs without one of their own, how long events are kept. */
  settings: Settings;
  /** Jobs went back to pending: there is work. */
  onReaped: () => void;
}

export class Reaper {
  readonly #db: Db;
  readonly #options: ReaperOptions;
  readonly #log: Logger;
  readonly #incidents: Incidents;
  #timer: ReturnType<typeof setInterval> | undefined;
  #round: Promise<void> = Promise.resolve();

  constructor(db: Db, options: ReaperOptions, log: Logger, incidents: Incidents) {
    this.#db = db;
    this.#options = options;
    this.#log = log;
    this.#incidents = incidents;
  }

  async start(): Promise<this> {
    await this.runOnce();
    this.#timer = setInterval(() => void this.runOnce(), this.#options.intervalMs);
    return this;
  }

  /** One round; never rejects (a database error is an incident, retried at the next round). */
  runOnce(): Promise<void> {
    this.#round = this.#round.then(async () => {
      try {
        const {
          reaped: result,
          pruned,
          history,
        } = await housekeepingRound(this.#db, this.#options.settings, { scheduleNext: false });
        this.#incidents.end('reaper');
        if (pruned.jobs > 0 || pruned.moved > 0 || pruned.events > 0 || pruned.steps > 0)
          this.#log.debug({ ...pruned }, 'pruned kept jobs past their time');
        if (pruned.rechecked > 0)
          this.#log.info(
            { runs: pruned.rechecked },
            'workflow runs passed by when their child ended (held by another transaction then) released',
          );
        if (history.dropped > 0 || history.pruned > 0)
          this.#log.info({ ...history }, 'history days past their keep dropped');
        const total = result.reclaimed.length + result.dead.length + result.cancelled.length;
        if (total === 0) return;
        const counts = {
          reclaimed: result.reclaimed.length,
          dead: result.dead.length,
          cancelled: result.cancelled.length,
        };
        this.#log.warn(counts, `reaped ${total} jobs whose lease had run out`);
        this.#options.onReaped();
      } catch (error) {
        this.#incidents.start('reaper', error);
      }
    });
    return this.#round;
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#round;
  }
}
