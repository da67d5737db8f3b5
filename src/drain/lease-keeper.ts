// The lease keeper: every job the drain holds, from its claim until it is settled or released, and
// the lock that proves it. It alone renews, expires and loses leases:
//
//   held ──renewal answered with the job──► held (renewedAt = the renewal's send time)
//        ──renewal answered without it────► lost: the job was reaped and may run elsewhere
//        ──no renewal for its whole visibility timeout (database out of reach)──► lost: the
//          reaper may already have handed it on
//        ──drop() (settled or released)──► gone
//
// One statement every third of the shortest visibility held renews the locks of all held jobs,
// fenced by their lock tokens. A lost job's handler is aborted through the function attached to
// it; a lost job that never started is reported to the drain, which forgets it.
import { type ClaimedJob, type Db, renewLeases } from '../queries/index.ts';

/** The handler's job was reaped (and maybe claimed elsewhere), or its lease could not be renewed. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

/** A running job's lock expires after this unless its drainer renews it (every third of it). */
export const DEFAULT_VISIBILITY_SECONDS = 30;
/** Renewals never come closer together than this. */
const MIN_RENEWAL_MS = 100;

interface Lease {
  job: ClaimedJob;
  renewedAt: number;
  visibilityMs: number;
  /** Aborts the running handler; unset while the job waits to start. */
  lose?: (error: LeaseLostError) => void;
}

export interface LeaseKeeperOptions {
  /** Applies to jobs without a visibility_seconds of their own. */
  visibilityTimeoutSeconds: number;
  /** A job lost before its handler started: the drain must not start it. */
  onLostUnstarted: (job: ClaimedJob) => void;
}

export class LeaseKeeper {
  readonly #db: Db;
  readonly #options: LeaseKeeperOptions;
  readonly #leases = new Map<string, Lease>();
  #renewing = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #due = Infinity;
  #stopped = false;

  constructor(db: Db, options: LeaseKeeperOptions) {
    this.#db = db;
    this.#options = options;
  }

  /** Jobs just claimed; their locks date from when the claim was sent, at the latest. */
  hold(jobs: readonly ClaimedJob[], claimSentAt: number): void {
    const fallbackMs = this.#options.visibilityTimeoutSeconds * 1000;
    for (const job of jobs) {
      this.#leases.set(job.id, { job, renewedAt: claimSentAt, visibilityMs: job.visibilitySeconds ? job.visibilitySeconds * 1000 : fallbackMs });
    }
    this.#schedule();
  }

  /** The job's handler started: losing its lease calls `lose`. */
  attach(jobId: string, lose: (error: LeaseLostError) => void): void {
    const lease = this.#leases.get(jobId);
    if (lease) lease.lose = lose;
  }

  /** Settled or released: no longer renewed. */
  drop(jobId: string): void {
    this.#leases.delete(jobId);
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  #lose(lease: Lease, why: string): void {
    this.#leases.delete(lease.job.id);
    if (lease.lose) lease.lose(new LeaseLostError(`job ${lease.job.id}: ${why}`));
    else this.#options.onLostUnstarted(lease.job);
  }

  /** The next renewal comes a third of the shortest held visibility after the last; a claim of a
   * shorter one brings it forward. */
  #schedule(): void {
    if (this.#stopped) return;
    let shortest = this.#options.visibilityTimeoutSeconds * 1000;
    for (const lease of this.#leases.values()) shortest = Math.min(shortest, lease.visibilityMs);
    const due = Date.now() + Math.max(MIN_RENEWAL_MS, Math.floor(shortest / 3));
    if (this.#timer !== undefined && due >= this.#due) return;
    clearTimeout(this.#timer);
    this.#due = due;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#due = Infinity;
      this.#tick();
      this.#schedule();
    }, due - Date.now());
  }

  #tick(): void {
    const now = Date.now();
    for (const lease of this.#leases.values()) {
      if (now - lease.renewedAt >= lease.visibilityMs) {
        this.#lose(lease, `its lease could not be renewed for ${lease.visibilityMs / 1000} s; the reaper may have handed it on`);
      }
    }
    if (this.#renewing || this.#leases.size === 0) return;
    this.#renewing = true;
    const sent = [...this.#leases.values()];
    renewLeases(this.#db, sent.map((l) => l.job))
      .then((ids) => {
        const renewed = new Set(ids);
        for (const lease of sent) {
          if (this.#leases.get(lease.job.id) !== lease) continue; // settled meanwhile
          if (renewed.has(lease.job.id)) lease.renewedAt = now;
          else this.#lose(lease, 'its lease was lost: the job was reaped and may be running elsewhere');
        }
      })
      .catch(() => {}) // out of reach: the expiry above decides
      .finally(() => {
        this.#renewing = false;
      });
  }
}
