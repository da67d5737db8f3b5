// The settler: what happens to a job once its handler has run (or will not run), batched. It owns
// the buffers of completions and failures and every settlement statement in flight:
//
//   complete(job) ─► buffered ─► one statement for whatever finished meanwhile: DELETE, or UPDATE to
//                                completed for kinds that keep their jobs, and to cancelled for
//                                jobs someone asked to cancel (or, with settleWithClaim, carried by
//                                the next claim's statement)
//   settledInTransaction(job)    a transactional handler completed it itself: counted only
//   fail(job, …)  ─► buffered ─► one UPDATE: retry with backoff, or dead
//   release(jobs) ─► at once  ─► one UPDATE: back to pending, attempt refunded (never started, or
//                                abandoned at shutdown: `reason` goes into last_error)
//
// A statement the database rolled back for a lock conflict (a deadlock, a serialization failure)
// is sent again, up to SETTLE_ATTEMPTS times; one that fails otherwise leaves its jobs running for
// the reaper (onError says so). finish() flushes what is buffered and resolves when every
// statement has returned.
import {
  type Backoff, type ClaimedJob, type ClaimLimits, type ClaimOptions, type CompletedJob, type Completion as CompletionResult, type Db, type Failure, claim, claimLimited,
  completeAndClaim, completeFollowed, completeJobs, failMany, release,
} from '../queries/index.ts';
import type { ClaimOutcome } from './claim-planner.ts';
import { isTransientConflict } from '../db/errors.ts';
import { PermanentJobError, RetryLaterError } from '../jobs/registry.ts';
import { describeError } from './run-handler.ts';

/** A settlement statement rolled back by a lock conflict is sent at most this many times in all. */
export const SETTLE_ATTEMPTS = 3;

export interface SettlerOptions {
  /** Count settled jobs in job_counts (the dashboard's chart, /metrics). */
  recordCounts: boolean;
  /** Completions ride the next claim's statement (see DrainProfile). */
  settleWithClaim: boolean;
  /** A settlement statement failed: its jobs stay running for the reaper. */
  onError?: (error: unknown) => void;
  /** A settlement statement returned (or failed): these jobs are no longer running in the
   * database's count (what a limited kind's next claim sees). */
  onJobsSettled?: (jobs: readonly ClaimedJob[]) => void;
  /** Completions made jobs of these kinds pending (they were waiting for them): claim again. */
  onReleased?: (kinds: readonly string[]) => void;
}

export interface SettledCounts {
  completed: number;
  /** Failed and scheduled for a retry. */
  failed: number;
  /** Failed for the last time (or permanently). */
  dead: number;
  released: number;
  /** Ended cancelled: someone asked to while they were held. */
  cancelled: number;
  /** Settlements refused by the lock token: the job had been reaped and re-claimed elsewhere. */
  lost: number;
}

export class Settler {
  readonly counts: SettledCounts = { completed: 0, failed: 0, dead: 0, released: 0, cancelled: 0, lost: 0 };
  readonly #db: Db;
  readonly #options: SettlerOptions;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #completions: SettlementBatcher<Completion>;
  readonly #failures: SettlementBatcher<{ job: ClaimedJob; failure: Failure }>;
  #claimsInFlight = 0;
  /** Called whenever a statement returns (the drain may have more to do). */
  onSettled: () => void = () => {};

  constructor(db: Db, options: SettlerOptions) {
    this.#db = db;
    this.#options = options;
    const counted = { recordCounts: options.recordCounts };
    // While a claim is in flight, completions wait for the next claim to carry them.
    this.#completions = new SettlementBatcher(
      (work) => this.#track(work),
      (batch) =>
        this.#settling(batch, resend(() => completeJobs(db, batch, counted)).then((done) => this.#completed(batch.length, done))),
      () => options.settleWithClaim && this.#claimsInFlight > 0,
    );
    this.#failures = new SettlementBatcher(
      (work) => this.#track(work),
      (batch) =>
        this.#settling(
          batch.map((b) => b.job),
          resend(() => failMany(db, batch.map((b) => b.failure), counted)).then((outcomes) => {
            for (const { outcome } of outcomes) this.counts[outcome === 'retry' ? 'failed' : outcome]++;
          }),
        ),
    );
  }

  /** `kept`: its kind keeps its jobs (for how long, and the result). */
  complete(job: ClaimedJob, kept?: Pick<CompletedJob, 'keepSeconds' | 'resultJson' | 'progressJson'>): void {
    this.#completions.add(kept ? { ...job, ...kept } : job);
  }

  /** A transactional handler's job, completed in its own transaction (which made jobs of
   * `releasedKinds` pending). */
  settledInTransaction(job: ClaimedJob, releasedKinds: readonly string[] = []): void {
    this.counts.completed++;
    this.#options.onJobsSettled?.([job]);
    if (releasedKinds.length > 0) this.#options.onReleased?.(releasedKinds);
    this.onSettled();
  }

  fail(job: ClaimedJob, error: unknown, backoff: Backoff | undefined): void {
    this.#failures.add({
      job,
      failure: {
        id: job.id,
        lockedBy: job.lockedBy,
        error: describeError(error),
        permanent: error instanceof PermanentJobError,
        retryAfterSeconds: error instanceof RetryLaterError ? error.retryAfterSeconds : undefined,
        backoff,
      },
    });
  }

  release(jobs: readonly ClaimedJob[], reason?: string): void {
    if (jobs.length === 0) return;
    this.#track(
      this.#settling(
        jobs,
        resend(() => release(this.#db, jobs, reason)).then((ids) => {
          this.counts.released += ids.length;
          this.counts.lost += jobs.length - ids.length;
        }),
      ),
    );
  }

  /** Sends a claim, carrying the waiting completions in its statement when the profile says so. A
   * kind limited across drainers is claimed through the limited claim, with nothing riding along. */
  claim(options: ClaimOptions, limits?: ClaimLimits): Promise<ClaimOutcome> {
    if (limits) {
      const { kinds, ...rest } = options;
      return claimLimited(this.#db, { ...rest, kind: kinds![0]!, limits });
    }
    this.#claimsInFlight++;
    const riding = this.#options.settleWithClaim ? this.#completions.take() : [];
    const sent: Promise<ClaimedJob[]> =
      riding.length === 0
        ? claim(this.#db, options)
        : completeAndClaim(this.#db, riding, options, { recordCounts: this.#options.recordCounts }).then(
            (result) => {
              const settled = new Set(result.completed);
              this.counts.completed += settled.size;
              this.#completions.taken();
              this.#options.onJobsSettled?.(riding.filter((job) => settled.has(job.id)));
              // Left running: something follows their end, or they are no longer ours.
              this.#completeFollowed(riding.filter((job) => !settled.has(job.id)));
              return result.claimed;
            },
            (error: unknown) => {
              this.#completions.taken(riding); // rolled back with the claim: they settle on their own
              throw error;
            },
          );
    return sent
      .then((jobs) => ({ jobs }))
      .finally(() => {
        this.#claimsInFlight--;
        this.#completions.nudge();
      });
  }

  /** Completions a merged settle-and-claim left running, through the statement with what follows a job's end. */
  #completeFollowed(jobs: Completion[]): void {
    if (jobs.length === 0) return;
    const counted = { recordCounts: this.#options.recordCounts };
    this.#track(this.#settling(jobs, resend(() => completeFollowed(this.#db, jobs, counted)).then((done) => this.#completed(jobs.length, done))));
  }

  /** Settlements are buffered or in flight. */
  get busy(): boolean {
    return this.#inFlight.size > 0 || this.#completions.size > 0 || this.#failures.size > 0;
  }

  /** Flushes what is buffered; resolves when every settlement statement has returned. */
  async finish(): Promise<void> {
    this.#completions.flush();
    this.#failures.flush();
    while (this.#inFlight.size > 0) {
      await Promise.all([...this.#inFlight]);
      this.#completions.flush();
      this.#failures.flush();
    }
  }

  /** `work` settles `jobs`; whether it succeeds or not, they are reported settled when it returns. */
  #settling(jobs: readonly ClaimedJob[], work: Promise<void>): Promise<void> {
    return work.finally(() => this.#options.onJobsSettled?.(jobs));
  }

  #completed(sent: number, { ended, releasedKinds }: CompletionResult): void {
    const cancelled = ended.reduce((n, e) => n + (e.status === 'cancelled' ? 1 : 0), 0);
    this.counts.completed += ended.length - cancelled;
    this.counts.cancelled += cancelled;
    this.counts.lost += sent - ended.length;
    if (releasedKinds.length > 0) this.#options.onReleased?.(releasedKinds);
  }

  #track(work: Promise<void>): void {
    const done = work
      .catch((error: unknown) => this.#options.onError?.(error))
      .finally(() => {
        this.#inFlight.delete(done);
        this.onSettled();
      });
    this.#inFlight.add(done);
  }
}

/** `statement()`, sent again (after a short random pause) while the database rolls it back for a lock conflict. */
async function resend<T>(statement: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await statement();
    } catch (error) {
      if (attempt >= SETTLE_ATTEMPTS || !isTransientConflict(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20 * attempt));
    }
  }
}

/** A job to complete; kinds that keep their jobs add how long, and the result. */
type Completion = ClaimedJob & Pick<CompletedJob, 'keepSeconds' | 'resultJson' | 'progressJson'>;

/**
 * Buffers items and settles them with one statement at a time. A flush waits for the next
 * macrotask, so handlers that finish in the same burst share one statement instead of the first
 * going alone; while a statement is in flight, new items wait for the next one. `take()` hands the
 * buffer to another statement (a claim) instead, counting as in flight until `taken()`, which gives
 * back what that statement could not settle; `holdWhile` keeps items for such a statement.
 */
class SettlementBatcher<T> {
  #buffer: T[] = [];
  #inFlight = false;
  #scheduled = false;
  readonly #track: (work: Promise<void>) => void;
  readonly #run: (batch: T[]) => Promise<void>;
  readonly #holdWhile: () => boolean;

  constructor(track: (work: Promise<void>) => void, run: (batch: T[]) => Promise<void>, holdWhile: () => boolean = () => false) {
    this.#track = track;
    this.#run = run;
    this.#holdWhile = holdWhile;
  }

  get size(): number {
    return this.#buffer.length;
  }

  add(item: T): void {
    this.#buffer.push(item);
    if (!this.#inFlight) this.nudge();
  }

  /** Settle what waits, soon, unless it is held or taken first. */
  nudge(): void {
    if (this.#scheduled || this.#buffer.length === 0 || this.#holdWhile()) return;
    this.#scheduled = true;
    setTimeout(() => {
      this.#scheduled = false;
      this.flush();
    }, 0);
  }

  flush(): void {
    if (this.#inFlight || this.#buffer.length === 0) return;
    this.#inFlight = true;
    const batch = this.#buffer;
    this.#buffer = [];
    this.#track(
      this.#run(batch).finally(() => {
        this.#inFlight = false;
        this.flush();
      }),
    );
  }

  take(): T[] {
    if (this.#inFlight || this.#buffer.length === 0) return [];
    this.#inFlight = true;
    const batch = this.#buffer;
    this.#buffer = [];
    return batch;
  }

  taken(unsettled: T[] = []): void {
    this.#buffer = [...unsettled, ...this.#buffer];
    this.#inFlight = false;
    // Not at once: the drain's next claim, decided before the next macrotask, may take them.
    this.nudge();
  }
}
