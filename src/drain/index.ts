// The drain loop, the same for the Worker and the sidecar. One call drains until there is no ready
// work, the budget is spent, or the caller aborts. It is a short loop over three parts, each the
// only owner of its state:
//
//   ClaimPlanner (claim-planner.ts)  which kinds to claim next and how many: claim groups, per-kind
//                                    caps, claims that grow far from the database
//   LeaseKeeper  (lease-keeper.ts)   every job held from its claim to its settlement: renewal,
//                                    expiry, loss (the handler's signal is aborted)
//   Settler      (settler.ts)        completions, failures and releases, batched into statements
//
// The loop itself (DrainRun.run) owns the jobs claimed but not started (`waiting`, oldest first) and the running
// handlers (at most `concurrency`). Each turn it is in one of these states:
//
//   running    free slots take waiting jobs
//   claiming   the planner has a claim to send (room for a batch, a group not drained): send it,
//              and look again at once
//   sleeping   nothing to do until a handler ends, a claim or settlement returns, the deadline
//              passes or the caller aborts
//   stopping   the deadline or an abort: no more claims or starts; waiting jobs are
//              released (attempt refunded); running handlers get until their (budget-clipped)
//              timeout
//   done       nothing waiting, running or being claimed, and stopping or every group drained:
//              every settlement is awaited and the report returned
//
// No transaction is held open across a handler, except a transactional kind's own (run-handler.ts),
// on a connection of its own. A process that dies anywhere in here leaves its jobs `running` with
// a lease the reaper will expire: never lost.
//
// A handler ends in one of these ways, and its job is settled by the settler accordingly:
//   returned                 complete (deleted, or kept with its result); a transactional job
//                            completed inside its own transaction already
//   threw / timed out        fail: retried with backoff, or dead
//   lease lost               fail, refused by the lock token (counted lost): someone else holds it
//   cancelled (lease keeper) complete, which ends it cancelled (someone asked to cancel it)
//   abandoned at shutdown    release: pending again, attempt refunded
import { PermanentJobError, type JobRegistry } from '../jobs/registry.ts';
import { type OpenTelemetryApi, ProcessSpan, openTelemetry, traceClaim } from '../tracing.ts';
import type { ClaimedJob, Db } from '../queries/index.ts';
import { ClaimPlanner, type PlannedClaim } from './claim-planner.ts';
import { DEFAULT_VISIBILITY_SECONDS, JobCancelledError, LeaseLostError, LeaseKeeper } from './lease-keeper.ts';
import { DRAIN_PROFILES, type DrainProfile, type Placement } from './profiles.ts';
import { HandlerAbandonedError, type HandlerEnvironment, type HandlerOutcome, type OpenTransactionConnection, runHandler } from './run-handler.ts';
import { type SettledCounts, Settler } from './settler.ts';

export { DEFAULT_VISIBILITY_SECONDS, JobCancelledError, LeaseLostError } from './lease-keeper.ts';
export { DRAIN_PROFILES, type DrainProfile, type Placement } from './profiles.ts';
export {
  describeError, MAX_PROGRESS_BYTES, MAX_RESULT_BYTES, type OpenTransactionConnection, type TransactionConnection,
} from './run-handler.ts';

export interface DrainOptions {
  /** Identifies this process in locked_by (each claim adds a sequence number to it). */
  workerId: string;
  /** Where this drainer runs relative to its database; picks the profile (profiles.ts) whose
   * defaults fill the sizes below. Default 'near'. */
  placement?: Placement;
  /** Jobs per claim (far: the least a claim asks for). */
  batchSize?: number;
  /** Far: claims grow up to this when handlers are quick next to the claim's round trip. */
  maxBatchSize?: number;
  /** Handlers running at once. */
  concurrency?: number;
  /** Claimed-but-not-started jobs to keep ready beyond the running ones, so the next claim's round
   * trip overlaps work. Default: batchSize. Released, attempt refunded, if the drain stops first. */
  prefetch?: number;
  /** Claim only these kinds. Default: every kind the registry has a handler for. */
  kinds?: readonly string[];
  /** Claim only these jobs, if ready and free (run-now); the drain ends when they are settled. */
  ids?: readonly string[];
  /** Stop claiming and clip handler timeouts so that the call returns within this. Default: none. */
  budgetMs?: number;
  /** Stop claiming when aborted; in-flight handlers finish (up to their timeout). */
  signal?: AbortSignal;
  /** When aborted (after `signal`, once a shutdown's grace is over): running handlers are given up —
   * their signals abort, the drain stops waiting for them, and their jobs go back to pending at
   * once with their attempt refunded, instead of waiting for the reaper. */
  abandonSignal?: AbortSignal;
  /** Count settled jobs in job_counts (the dashboard's chart, /metrics). Default true. */
  recordCounts?: boolean;
  /** Leases of jobs without a visibility of their own last this long unless renewed (every third
   * of it). Default DEFAULT_VISIBILITY_SECONDS. */
  visibilityTimeoutSeconds?: number;
  /** Called when a settlement statement fails (the jobs stay running for the reaper). */
  onSettleError?: (error: unknown) => void;
  /** Called when a claim fails. The drain goes on with what it holds and claims again at the next
   * poll; if it ends with its last claim failed, it throws that error. */
  onClaimError?: (error: unknown) => void;
  /** Connections for transactional kinds' handlers, each held for one handler's run. Default:
   * transactions on `db` itself (which cannot be cut short when a handler is given up). */
  transactions?: OpenTransactionConnection;
  /** What the runtime hears as it happens (the sidecar's LISTEN): jobs that became ready are
   * claimed at once, even while other handlers keep the drain open, and a cancel of a job held
   * here is checked at once instead of at its next lease renewal. */
  notices?: DrainNotices;
  /** While the drain is open (handlers running) and a claim came back short, it looks again this
   * often for jobs that became due or were enqueued where no notice reaches it. Default: the
   * profile's (1 s). */
  pollIntervalMs?: number;
}

interface NoticeListener {
  ready?: (kind: string | undefined) => void;
  cancelRequested?: (jobId: string) => void;
}

/** What a runtime hears about the queue as it happens, for whichever drains are open then. */
export class DrainNotices {
  readonly #listeners = new Set<NoticeListener>();

  /** Jobs of `kind` (any kind: undefined) may be ready to claim. */
  ready(kind?: string): void {
    for (const listener of this.#listeners) listener.ready?.(kind);
  }

  /** Someone asked to cancel the job. */
  cancelRequested(jobId: string): void {
    for (const listener of this.#listeners) listener.cancelRequested?.(jobId);
  }

  /** Returns the unsubscribe function. */
  subscribe(listener: NoticeListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

export interface DrainReport extends SettledCounts {
  claimed: number;
  elapsedMs: number;
  stoppedBy: 'empty' | 'budget' | 'signal';
  /** When a kind whose limits held ready jobs back may be claimed again (epoch ms); null when
   * nothing was held back. A caller that drains again then finds the limit's next room. */
  nextClaimAt: number | null;
}

let claimSequence = 0;

export function drain(db: Db, registry: JobRegistry, options: DrainOptions): Promise<DrainReport> {
  return new DrainRun(db, registry, options).run();
}

/** One drain call: the loop of the header comment and the state it owns. */
class DrainRun {
  readonly #started = Date.now();
  readonly #registry: JobRegistry;
  readonly #options: DrainOptions;
  readonly #concurrency: number;
  readonly #pollIntervalMs: number;
  readonly #visibilityTimeoutSeconds: number;
  readonly #budget: ReturnType<typeof budgetClock>;
  readonly #planner: ClaimPlanner;
  readonly #settler: Settler;
  readonly #leases: LeaseKeeper;
  readonly #handlerEnvironment: HandlerEnvironment;
  readonly #unsubscribe: () => void;
  /** Claimed, not started, oldest first. */
  readonly #waiting: ClaimedJob[] = [];
  readonly #running = new Set<Promise<void>>();
  readonly #wakeup = new Wakeup();
  /** Tracing (src/tracing.ts): the API when the app uses OpenTelemetry, and each claimed job's
   * claim span context. */
  #tracing: OpenTelemetryApi | null = null;
  readonly #claimContexts = new WeakMap<ClaimedJob, ReturnType<typeof traceClaim>>();
  #claimed = 0;
  #lostUnstarted = 0;
  /** The last claim's error, until a claim succeeds again (the drain throws it if it ends so). */
  #claimError: unknown;
  #stoppedBy: DrainReport['stoppedBy'] = 'empty';

  constructor(db: Db, registry: JobRegistry, options: DrainOptions) {
    const profile: DrainProfile = DRAIN_PROFILES[options.placement ?? 'near'];
    const batchSize = Math.max(1, options.batchSize ?? profile.batchSize);
    this.#registry = registry;
    this.#options = options;
    this.#concurrency = Math.max(1, options.concurrency ?? profile.concurrency);
    this.#pollIntervalMs = Math.max(10, options.pollIntervalMs ?? profile.pollIntervalMs);
    this.#visibilityTimeoutSeconds = options.visibilityTimeoutSeconds ?? DEFAULT_VISIBILITY_SECONDS;
    this.#budget = budgetClock(this.#started, options.budgetMs, options.signal);
    this.#planner = new ClaimPlanner(registry, {
      kinds: options.kinds ?? registry.kinds(),
      batchSize,
      maxBatchSize: Math.max(batchSize, options.maxBatchSize ?? profile.maxBatchSize ?? batchSize),
      concurrency: this.#concurrency,
      prefetch: Math.max(0, options.prefetch ?? batchSize),
      claimsInFlight: profile.claimsInFlight,
      claimLimit: options.ids ? new Set(options.ids).size : undefined,
    });
    this.#settler = new Settler(db, {
      recordCounts: options.recordCounts !== false,
      settleWithClaim: profile.settleWithClaim,
      onError: options.onSettleError,
      onJobsSettled: (jobs) => {
        for (const job of jobs) this.#planner.settledInDatabase(job.kind);
      },
      // Jobs that waited for ours are pending now: this drain runs them too.
      onReleased: (kinds) => this.#planner.reopen(kinds),
    });
    this.#settler.onSettled = () => this.#wakeup.wake();
    this.#leases = new LeaseKeeper(db, {
      visibilityTimeoutSeconds: this.#visibilityTimeoutSeconds,
      onLostUnstarted: (job, error) => this.#forgetUnstarted(job, error),
    });
    this.#handlerEnvironment = {
      db,
      transactions: options.transactions,
      progress: (jobId, json) => this.#leases.progress(jobId, json),
      unsavedProgress: (jobId) => this.#leases.unsavedProgress(jobId),
      recordCounts: options.recordCounts !== false,
    };
    this.#unsubscribe =
      options.notices?.subscribe({
        ready: (kind) => {
          this.#planner.reopen(kind === undefined ? undefined : [kind]);
          this.#wakeup.wake();
        },
        cancelRequested: (jobId) => this.#leases.checkNow(jobId),
      }) ?? (() => {});
    options.abandonSignal?.addEventListener(
      'abort',
      () => this.#leases.abandonRunning(new HandlerAbandonedError('the drainer shut down before the handler finished; released to run again')),
      { once: true },
    );
  }

  async run(): Promise<DrainReport> {
    this.#tracing = await openTelemetry();
    for (;;) {
      const stop = this.#budget.stopReason();
      if (stop) this.#stoppedBy = stop;
      const stopping = stop !== null;
      if (!stopping) while (this.#waiting.length > 0 && this.#running.size < this.#concurrency) this.#start(this.#waiting.shift()!);
      // Held open by running handlers: look again for what came due since a claim came back short.
      const pollAt = this.#planner.oldestDrainedAt + this.#pollIntervalMs;
      if (!stopping && Date.now() >= pollAt) this.#planner.reopenDrainedBefore(Date.now() - this.#pollIntervalMs);
      const plan = stopping ? null : this.#planner.next({ waiting: this.#waiting.length, running: this.#running.size });
      if (plan) {
        this.#sendClaim(plan);
        continue; // maybe another claim fits
      }
      if (stopping) this.#releaseWaiting();
      const idle = this.#planner.inFlight === 0 && this.#running.size === 0 && this.#waiting.length === 0;
      // Settlements still on their way may free a limited kind's slots: wait for them first.
      if (idle && (stopping || (this.#planner.exhausted && !this.#settler.busy))) break;
      // A blocked limited kind may be claimed again at its time, and the poll comes due: wake then too.
      const wakeAt = Math.min(this.#budget.claimDeadline, this.#planner.nextUnblockAt, this.#planner.oldestDrainedAt + this.#pollIntervalMs);
      await this.#wakeup.wait(stopping ? Infinity : wakeAt, this.#options.signal);
    }
    this.#leases.stop();
    this.#unsubscribe();
    await this.#settler.finish();
    if (this.#claimError !== undefined) throw this.#claimError;
    const counts = this.#settler.counts;
    const nextClaimAt = this.#stoppedBy === 'empty' && Number.isFinite(this.#planner.nextUnblockAt) ? this.#planner.nextUnblockAt : null;
    return { claimed: this.#claimed, ...counts, lost: counts.lost + this.#lostUnstarted, elapsedMs: Date.now() - this.#started, stoppedBy: this.#stoppedBy, nextClaimAt };
  }

  #start(job: ClaimedJob): void {
    const startedAt = performance.now();
    const attach = (giveUp: (error: Error) => void) => this.#leases.attach(job.id, giveUp);
    const claimContext = this.#tracing ? this.#claimContexts.get(job) : undefined;
    const span = this.#tracing && claimContext ? new ProcessSpan(this.#tracing, job, claimContext) : undefined;
    const task = runHandler(this.#registry, job, this.#budget.handlerDeadline, this.#handlerEnvironment, attach, span).then(
      (outcome) => {
        this.#planner.handlerTook(performance.now() - startedAt);
        const progressJson = this.#leases.drop(job.id);
        this.#settle(job, outcome, progressJson);
        span?.end('completed');
      },
      (error: unknown) => {
        this.#leases.drop(job.id);
        span?.end(outcomeOf(job, error), error);
        if (error instanceof HandlerAbandonedError) this.#settler.release([job], error.message);
        else if (error instanceof JobCancelledError) this.#settleCancelled(job);
        else this.#settler.fail(job, error, this.#registry.get(job.kind)?.backoff);
      },
    );
    const tracked = task.finally(() => {
      this.#running.delete(tracked);
      this.#planner.letGo(job.kind);
      this.#wakeup.wake();
    });
    this.#running.add(tracked);
  }

  #settle(job: ClaimedJob, outcome: HandlerOutcome, progressJson: string | undefined): void {
    if (outcome?.settledInTransaction) this.#settler.settledInTransaction(job, outcome.releasedKinds);
    else this.#settler.complete(job, outcome?.kept && progressJson !== undefined ? { ...outcome.kept, progressJson } : outcome?.kept);
  }

  /** Someone asked to cancel it: the completing statement ends it cancelled (kept like a completed
   * job of its kind, without a result). */
  #settleCancelled(job: ClaimedJob): void {
    const keepSeconds = this.#registry.get(job.kind)?.keepCompletedSeconds ?? 0;
    this.#settler.complete(job, keepSeconds > 0 ? { keepSeconds, resultJson: null } : undefined);
  }

  #sendClaim(plan: PlannedClaim): void {
    const lockToken = `${this.#options.workerId}:${++claimSequence}`;
    const sentAt = Date.now(); // the lock's time is the claim's, at the latest
    const claim = { batchSize: plan.size, lockToken, kinds: plan.kinds, ids: this.#options.ids, leaseSeconds: this.#visibilityTimeoutSeconds };
    this.#settler
      .claim(claim, plan.limits)
      .then(
        (outcome) => {
          this.#planner.settled(plan, outcome, Date.now() - sentAt);
          this.#claimError = undefined;
          this.#claimed += outcome.jobs.length;
          if (this.#tracing && outcome.jobs.length > 0) {
            const context = traceClaim(this.#tracing, [...new Set(outcome.jobs.map((j) => j.kind))], outcome.jobs.length, sentAt);
            for (const job of outcome.jobs) this.#claimContexts.set(job, context);
          }
          this.#leases.hold(outcome.jobs, sentAt);
          this.#waiting.push(...outcome.jobs);
        },
        (error: unknown) => {
          // Tried again at the next poll while handlers hold the drain open; thrown if it ends so.
          this.#planner.settled(plan, null, 0);
          this.#claimError = error;
          this.#options.onClaimError?.(error);
        },
      )
      .finally(() => this.#wakeup.wake());
  }

  /** Stopping: jobs claimed but not started go back, their attempt refunded. */
  #releaseWaiting(): void {
    const unstarted = this.#waiting.splice(0);
    for (const job of unstarted) {
      this.#planner.letGo(job.kind);
      this.#leases.drop(job.id);
    }
    this.#settler.release(unstarted);
  }

  /** Its lease was lost before it started (whoever holds it now runs it), or someone cancelled it
   * (it ends cancelled without running). */
  #forgetUnstarted(job: ClaimedJob, error: LeaseLostError | JobCancelledError): void {
    const at = this.#waiting.indexOf(job);
    if (at < 0) return;
    this.#waiting.splice(at, 1);
    this.#planner.letGo(job.kind);
    if (error instanceof JobCancelledError) {
      this.#settleCancelled(job);
      return;
    }
    this.#planner.settledInDatabase(job.kind); // another drainer holds it now
    this.#lostUnstarted++;
  }
}

/** What a failed attempt leads to, for its trace: `retry`, `dead`, `cancelled`, `released`, `lost`. */
function outcomeOf(job: ClaimedJob, error: unknown): string {
  if (error instanceof JobCancelledError) return 'cancelled';
  if (error instanceof HandlerAbandonedError) return 'released';
  if (error instanceof LeaseLostError) return 'lost';
  return error instanceof PermanentJobError || job.attempts >= job.maxAttempts ? 'dead' : 'retry';
}

/**
 * The budget's two deadlines: claims stop at `claimDeadline`; handlers already running may go on
 * for half the margin more, and the other half is left for settling. The margin is 10% of the
 * budget, at most 1 s.
 */
function budgetClock(started: number, budgetMs = Infinity, signal?: AbortSignal) {
  const margin = Math.min(1000, budgetMs * 0.1);
  const claimDeadline = started + budgetMs - margin;
  return {
    claimDeadline,
    handlerDeadline: started + budgetMs - margin / 2,
    stopReason: (): DrainReport['stoppedBy'] | null => (signal?.aborted ? 'signal' : Date.now() >= claimDeadline ? 'budget' : null),
  };
}

/** The loop's sleep: until wake() (a handler ended, a claim or settlement returned), the deadline, or an abort. */
class Wakeup {
  #resolve: () => void = () => {};

  wake(): void {
    this.#resolve();
  }

  async wait(deadline: number, signal?: AbortSignal): Promise<void> {
    const woken = new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
    const timer = Number.isFinite(deadline) ? setTimeout(() => this.wake(), Math.max(0, deadline - Date.now())) : undefined;
    const onAbort = () => this.wake();
    signal?.addEventListener('abort', onAbort, { once: true });
    await woken;
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}
