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
// fenced by their lock tokens, each for its own lease (the job's visibility, else the drainer's).
// A lease is given up the moment it runs out locally — its last successful renewal's send time
// plus its visibility, never later than the database's own end of it — not at the next renewal.
// A lost job's handler is aborted through the function attached to it; a lost job that never
// started is reported to the drain, which forgets it.
//
// The renewal also carries what handlers reported with ctx.progress() (a report brings the next
// renewal forward, but never to less than a second after the previous one), and its answer says
// which jobs someone asked to cancel: those are given up like lost ones, with JobCancelledError,
// and the drain ends them cancelled. checkNow() renews at once (a sidecar heard of a cancel).
import { type ClaimedJob, type Db, type HeldLease, type RenewedLease, renew } from '../queries/index.ts';
import type { JobRecord } from './job-record.ts';
import { PgdrainError } from '../errors.ts';

/** The handler's job was reaped (and maybe claimed elsewhere), or its lease could not be renewed. */
export class LeaseLostError extends PgdrainError {
  override name = 'LeaseLostError';
  readonly code = 'lease_lost';
}

/** Someone asked to cancel the job (POST /jobs/:id/cancel, pgdrain.cancel()): it ends cancelled. */
export class JobCancelledError extends PgdrainError {
  override name = 'JobCancelledError';
  readonly code = 'job_cancelled';
}

/** Renewals never come closer together than this. */
const MIN_RENEWAL_MS = 100;
/** Progress is saved at most this often. */
export const PROGRESS_INTERVAL_MS = 1_000;

interface Lease {
  record: JobRecord;
  job: ClaimedJob;
  renewedAt: number;
  visibilityTimeoutMs: number;
  /** Gives the running handler up; unset while the job waits to start. */
  lose?: (error: Error) => void;
  /** Reported by the handler and not saved yet (JSON text). */
  progressJson?: string;
  /** Its handler's own statement that may settle it is on its way: renewals leave it out (one
   * that reached the database after that statement would find the job settled and call it lost). */
  settling?: boolean;
}

export interface LeaseKeeperOptions {
  /** Applies to jobs without a visibility_seconds of their own. */
  visibilityTimeoutSeconds: number;
  /** A job lost (LeaseLostError) or cancelled (JobCancelledError) before its handler started:
   * the drain must not start it. */
  onLostUnstarted: (record: JobRecord, error: LeaseLostError | JobCancelledError) => void;
  /** The renewal statement (default: src/queries' renew on `db`); a unit test passes its own. */
  renew?: (held: readonly HeldLease[]) => Promise<RenewedLease[]>;
}

export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  readonly #leases = new Map<string, Lease>();
  #renewing = false;
  /** The renewal on its way, if any (saveProgress waits for it: it may carry an older report). */
  #renewal: Promise<void> | null = null;
  /** A renewal wanted while one was in flight: due then, not before it returns. */
  #renewAgainAt = Infinity;
  #lastRenewalAt = 0;
  /** When the next renewal is due (Infinity: none scheduled). */
  #renewAt = Infinity;
  /** No held lease runs out before this (a bound: leases dropped since may have set it; the
   * timer's tick finds the exact moment). Kept as leases come, so that a claim costs its own jobs
   * and not a pass over every held one. */
  #firstExpiryAt = Infinity;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** When the timer rings (Infinity: it is not armed). */
  #timerAt = Infinity;
  #stopped = false;

  readonly #renewStatement: (held: readonly HeldLease[]) => Promise<RenewedLease[]>;

  constructor(db: Db, options: LeaseKeeperOptions) {
    this.#options = options;
    this.#renewStatement = options.renew ?? ((held) => renew(db, held));
  }

  /** Jobs just claimed; their locks date from when the claim was sent, at the latest. */
  hold(records: readonly JobRecord[]): void {
    const fallbackMs = this.#options.visibilityTimeoutSeconds * 1000;
    let shortest = fallbackMs;
    let firstExpiryAt = this.#firstExpiryAt;
    for (const record of records) {
      const { job } = record;
      const visibilityTimeoutMs = job.visibilityTimeoutSeconds ? job.visibilityTimeoutSeconds * 1000 : fallbackMs;
      this.#leases.set(job.id, { record, job, renewedAt: record.claimSentAt, visibilityTimeoutMs });
      shortest = Math.min(shortest, visibilityTimeoutMs);
      firstExpiryAt = Math.min(firstExpiryAt, record.claimSentAt + visibilityTimeoutMs);
    }
    this.#firstExpiryAt = firstExpiryAt;
    // A third of the shortest visibility from now at the latest: a claim of a shorter one brings it
    // forward (the leases held before already bound #renewAt).
    this.#renewAt = Math.min(this.#renewAt, Date.now() + Math.max(MIN_RENEWAL_MS, Math.floor(shortest / 3)));
    this.#schedule();
  }

  /** The job's handler started: losing its lease calls `lose`. */
  attach(jobId: string, lose: (error: Error) => void): void {
    const lease = this.#leases.get(jobId);
    if (lease) lease.lose = lose;
  }

  /** The handler reported progress (JSON text): saved with a renewal within about a second. */
  progress(jobId: string, json: string): void {
    const lease = this.#leases.get(jobId);
    if (!lease) return;
    lease.progressJson = json;
    this.#bringRenewalForward(this.#lastRenewalAt + PROGRESS_INTERVAL_MS);
  }

  /** Renew now if `jobId` is held: someone may have asked to cancel it. */
  checkNow(jobId: string): void {
    if (this.#leases.has(jobId)) this.#bringRenewalForward(0);
  }

  /** Settled or released: no longer renewed. Returns its progress report not saved yet, if any. */
  drop(jobId: string): string | undefined {
    const progressJson = this.#leases.get(jobId)?.progressJson;
    this.#leases.delete(jobId);
    return progressJson;
  }

  /** Saves the job's progress report not saved yet, now (a fenced renewal of its lease alone):
   * for a handler about to settle its job itself, whose lease is dropped then. */
  async saveProgress(jobId: string): Promise<void> {
    // A renewal on its way may carry an older report: it lands first, then this one.
    if (this.#renewal) await this.#renewal;
    const lease = this.#leases.get(jobId);
    const progressJson = lease?.progressJson;
    if (!lease || progressJson === undefined) return;
    const { job } = lease;
    const visibilityTimeoutSeconds = lease.visibilityTimeoutMs / 1000;
    await this.#renewStatement([{ id: job.id, lockedBy: job.lockedBy, visibilityTimeoutSeconds, progressJson }]);
    if (lease.progressJson === progressJson) lease.progressJson = undefined;
  }

  /** Its handler sends a statement that may settle the job itself (a snooze): renewals leave it out
   * until the returned function is called (or the lease is dropped). Its expiry still applies. */
  holdForSettling(jobId: string): () => void {
    const lease = this.#leases.get(jobId);
    if (!lease) return () => {};
    lease.settling = true;
    return () => {
      lease.settling = false;
    };
  }

  /** The job's progress report not saved yet, if any. */
  unsavedProgress(jobId: string): string | undefined {
    return this.#leases.get(jobId)?.progressJson;
  }

  /** Gives up every running handler with `error` (the drainer is shutting down); their leases end here. */
  abandonRunning(error: Error): void {
    for (const lease of this.#leases.values()) {
      if (!lease.lose) continue;
      this.#leases.delete(lease.job.id);
      lease.lose(error);
    }
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
  }

  #lose(lease: Lease, error: LeaseLostError | JobCancelledError): void {
    this.#leases.delete(lease.job.id);
    if (lease.lose) lease.lose(error);
    else this.#options.onLostUnstarted(lease.record, error);
  }

  #bringRenewalForward(at: number): void {
    if (this.#stopped) return;
    if (this.#renewing) {
      this.#renewAgainAt = Math.min(this.#renewAgainAt, at);
      return;
    }
    const due = Math.max(Date.now(), at);
    if (due >= this.#renewAt) return;
    this.#renewAt = due;
    this.#schedule();
  }

  #renewalInterval(): number {
    let shortest = this.#options.visibilityTimeoutSeconds * 1000;
    for (const lease of this.#leases.values()) shortest = Math.min(shortest, lease.visibilityTimeoutMs);
    return Math.max(MIN_RENEWAL_MS, Math.floor(shortest / 3));
  }

  /** One timer, for whichever comes first: the next renewal, or the moment a lease runs out (its
   * handler is given up then, not at the next renewal). */
  #schedule(): void {
    if (this.#stopped || this.#leases.size === 0) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Infinity;
      return;
    }
    const next = Math.min(this.#renewAt, this.#firstExpiryAt);
    if (next === this.#timerAt) return; // armed for it already (a claim's hold changes nothing)
    clearTimeout(this.#timer);
    this.#timerAt = next;
    this.#timer = setTimeout(() => this.#tick(), Math.max(0, next - Date.now()));
  }

  #tick(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = Date.now();
    this.#firstExpiryAt = Infinity;
    for (const lease of this.#leases.values()) {
      const expiresAt = lease.renewedAt + lease.visibilityTimeoutMs;
      if (expiresAt > now) this.#firstExpiryAt = Math.min(this.#firstExpiryAt, expiresAt);
      else {
        const why =
          `its lease could not be renewed for ${lease.visibilityTimeoutMs / 1000} s; the reaper may have ` +
          `handed it on`;
        this.#lose(lease, new LeaseLostError(`job ${lease.job.id}: ${why}`));
      }
    }
    if (now >= this.#renewAt) {
      this.#renewAt = this.#leases.size > 0 ? now + this.#renewalInterval() : Infinity;
      this.#renew(now);
    }
    this.#schedule();
  }

  /** One statement renews every held lease (saving reported progress); a job missing from the
   * answer was reaped elsewhere, one marked cancelRequested is given up as cancelled. */
  #renew(sentAt: number): void {
    if (this.#renewing || this.#leases.size === 0) return;
    this.#renewing = true;
    this.#lastRenewalAt = sentAt;
    const sent = [...this.#leases.values()]
      .filter((lease) => !lease.settling)
      .map((lease) => ({ lease, progressJson: lease.progressJson }));
    this.#renewal = this.#renewStatement(
      sent.map(({ lease, progressJson }) => ({
        id: lease.job.id,
        lockedBy: lease.job.lockedBy,
        visibilityTimeoutSeconds: lease.visibilityTimeoutMs / 1000,
        progressJson,
      })),
    )
      .then((answers) => {
        const renewed = new Map(answers.map((a) => [a.id, a]));
        for (const { lease, progressJson } of sent) {
          if (this.#leases.get(lease.job.id) !== lease) continue; // settled meanwhile
          const answer = renewed.get(lease.job.id);
          // Its handler's own statement may have settled it since: not a loss (that statement is fenced).
          if (!answer && lease.settling) continue;
          if (!answer) {
            this.#lose(
              lease,
              new LeaseLostError(
                `job ${lease.job.id}: its lease was lost: the job was reaped and may be running elsewhere`,
              ),
            );
            continue;
          }
          lease.renewedAt = sentAt;
          if (lease.progressJson === progressJson) lease.progressJson = undefined;
          if (answer.cancelRequested)
            this.#lose(lease, new JobCancelledError(`job ${lease.job.id} was cancelled while it ran`));
        }
      })
      .catch(() => {}) // out of reach: the expiry timer decides
      .finally(() => {
        this.#renewing = false;
        this.#renewal = null;
        if (this.#renewAgainAt < Infinity)
          this.#renewAt = Math.min(this.#renewAt, Math.max(Date.now(), this.#renewAgainAt));
        this.#renewAgainAt = Infinity;
        this.#schedule();
      });
  }
}
