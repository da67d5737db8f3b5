// The sidecar's drain scheduler: runs drain() whenever something says there may be work.
//
//   sleeping ──wake() (NOTIFY, reaper, listener reconnect), poll interval, the time a limited
//             kind's limits allow its next claim, or the time the last drain knew a job it
//             settled is due again (a retry's backoff, a snoozed workflow)──► draining
//   draining ──wake()──► the open drain claims at once (slow handlers do not hold new jobs back)
//   draining ──drain() returned (nothing running, nothing to claim)──► draining again if woken
//             meanwhile, else sleeping
//   draining ──drain() threw (database down)──► sleeping for a growing pause (≤ 5 polls)
//   any ──stop(grace)──► no new claims; the running drain releases unstarted jobs, and its running
//         handlers get `grace` to finish ──still running──► abandoned: their signals abort, their
//         jobs go back to pending at once (attempt refunded), the drain returns
//
// Beside the loop, every `vacuumEveryJobs` jobs it claims, a VACUUM of the jobs table keeps the
// claims' walk of jobs_ready short (queue-vacuum.ts); stop() waits for a running one.
import { DrainNotices, type DrainReport, DrainSession, type DrainSessionOptions, drainIn } from '../drain/index.ts';
import type { JobRegistry } from '../jobs/index.ts';
import type { Db } from '../queries/index.ts';
import { drainAgainAt } from '../runtime/core.ts';
import { DEFAULT_VACUUM_EVERY_JOBS } from '../db/constants.ts';
import { QueueVacuum, type QueueVacuumOptions } from './queue-vacuum.ts';

export interface DrainerOptions extends DrainSessionOptions {
  pollIntervalMs: number;
  /** What the runtime hears (NOTIFY): a ready notice wakes the drainer, or the open drain. */
  notices?: DrainNotices;
  onReport?: (report: DrainReport) => void;
  /** A drain failed (it is retried after a pause). */
  onError?: (error: unknown) => void;
  /** A drain succeeded after failures. */
  onRecovered?: () => void;
  /** A VACUUM of the jobs table every this many jobs claimed (VACUUM_EVERY_JOBS); 0: never.
   * Default DEFAULT_VACUUM_EVERY_JOBS. */
  vacuumEveryJobs?: number;
  /** Where that VACUUM runs (it holds a connection while it scans). Default: the drain's own. */
  vacuumDb?: Db;
  /** What becomes of the VACUUMs: for the log. */
  vacuumEvents?: Omit<QueueVacuumOptions, 'everyJobs'>;
}

export class Drainer {
  readonly #options: DrainerOptions;
  /** Built once: every drain of this drainer is one of its session's. */
  readonly #session: DrainSession;
  readonly #stop = new AbortController();
  readonly #abandon = new AbortController();
  readonly #notices: DrainNotices;
  #unsubscribe: () => void = () => {};
  #wakeRequested = true;
  #wakeUp: (() => void) | null = null;
  #loop: Promise<void> | null = null;
  readonly #vacuum: QueueVacuum;
  /** A drain or a claim inside one failed, and no drain has succeeded since. */
  #failing = false;

  constructor(db: Db, registry: JobRegistry, options: DrainerOptions) {
    this.#options = options;
    this.#notices = options.notices ?? new DrainNotices();
    this.#vacuum = new QueueVacuum(options.vacuumDb ?? db, {
      ...options.vacuumEvents,
      everyJobs: options.vacuumEveryJobs ?? DEFAULT_VACUUM_EVERY_JOBS,
    });
    const {
      onReport: _r,
      onError: _e,
      onRecovered: _v,
      vacuumEveryJobs: _j,
      vacuumDb: _d,
      vacuumEvents: _ev,
      ...session
    } = options;
    this.#session = new DrainSession(db, registry, {
      ...session,
      notices: this.#notices,
      onClaimed: (jobs) => {
        this.#vacuum.jobsClaimed(jobs);
        options.onClaimed?.(jobs);
      },
      // A claim that failed inside a drain that went on (handlers held it open) is a failure too.
      onClaimError: (error) => {
        this.#failing = true;
        options.onClaimError?.(error);
      },
    });
  }

  /** Starts the loop; its first drain runs at once. */
  start(): this {
    if (!this.#loop) {
      this.#unsubscribe = this.#notices.subscribe({ ready: () => this.#wokenUp() });
      this.#loop = this.#run().finally(() => this.#unsubscribe());
    }
    return this;
  }

  /** There may be work of any kind: the open drain claims now, or a drain starts. */
  wake(): void {
    this.#notices.ready();
  }

  #wokenUp(): void {
    this.#wakeRequested = true;
    this.#wakeUp?.();
  }

  /**
   * Stops claiming; resolves true if the current drain finished within `graceMs`. Otherwise its
   * running handlers are abandoned (their jobs released) and this waits up to `settleMs` more for
   * those releases to reach the database; resolves false.
   */
  async stop(graceMs: number, settleMs = 5_000): Promise<boolean> {
    this.#stop.abort();
    this.#wakeUp?.();
    if (!this.#loop) return true;
    const finished = await settlesWithin(this.#loop, graceMs);
    if (!finished) {
      this.#abandon.abort();
      await settlesWithin(this.#loop, settleMs);
    }
    await this.#vacuum.stop();
    return finished;
  }

  async #run(): Promise<void> {
    const { pollIntervalMs, onReport, onError, onRecovered } = this.#options;
    let pause = 0;
    let last: DrainReport | null = null;
    while (!this.#stop.signal.aborted) {
      // When the core says to drain again (runtime/core.ts: a limited kind's next allowed claim, a
      // job a drain settled due again), if that is sooner than the poll.
      const again = last ? drainAgainAt(last, { dueAt: this.#session.dueTimes.next }) : null;
      const untilAgain = again === null ? Infinity : Math.max(0, again - Date.now());
      if (!this.#wakeRequested) await this.#sleep(pause || Math.min(jittered(pollIntervalMs), untilAgain));
      this.#wakeRequested = false;
      if (this.#stop.signal.aborted) break;
      try {
        const report = await drainIn(this.#session, { signal: this.#stop.signal, abandonSignal: this.#abandon.signal });
        if (this.#failing) onRecovered?.();
        this.#failing = false;
        pause = 0;
        last = report;
        onReport?.(report);
      } catch (error) {
        this.#failing = true;
        onError?.(error);
        pause = Math.min(pollIntervalMs * 5, Math.max(100, pause * 2));
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.#wakeUp?.(), ms);
      this.#wakeUp = () => {
        clearTimeout(timer);
        this.#wakeUp = null;
        resolve();
      };
    });
  }
}

/** True when `work` settles within `ms`. */
async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    work.then(() => true),
    new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]);
  clearTimeout(timer);
  return settled;
}

/** The poll's pause, a tenth either way at random: sidecars started together (a deploy) do not poll
 * in step, which matters most when they wake by polling only (behind a transaction pooler). */
const jittered = (ms: number): number => ms * (0.9 + Math.random() * 0.2);
