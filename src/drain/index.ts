// The drain loop, the same for the Worker and the sidecar. One call drains until there is nothing
// running and nothing to claim, the budget is spent, or the caller aborts. It is a short loop over
// named parts, each the only owner of its state:
//
//   JobBook      (job-record.ts)     every claimed job as a record in one state — claimed, running,
//                                    settling, done — changed only by guarded transitions; the one
//                                    place that hears of a job's end and keeps the planner's counts
//   ClaimPlanner (claim-planner.ts)  which kinds to claim next and how many: claim groups, per-kind
//                                    caps, limits across drainers, claims that grow far from the
//                                    database, the poll while handlers hold the drain open
//   Claimer      (claimer.ts)        sends the claims (carrying waiting completions far from the
//                                    database)
//   LeaseKeeper  (lease-keeper.ts)   every job held from its claim to its settlement: renewal,
//                                    expiry, loss (the handler's signal is aborted), cancels
//   Settler      (settler.ts)        completions, failures and releases, batched into statements
//   runHandler   (run-handler.ts)    one handler, with its timeout and, for transactional kinds,
//                                    its transaction
//   Deadlines    (deadlines.ts)      one timer for every running handler's timeout
//   BatchRunner  (batch-runner.ts)   a batch kind's jobs, up to its size per handler call (its own
//                                    claims and book; a call takes one slot)
//   DrainSession (session.ts)        what stays from one drain to the next, built once by a drainer:
//                                    its options resolved, its claims' form, the jobs its drains
//                                    made due again (drainIn runs a drain in it)
//
// The loop is in one of three modes, each entered by one transition:
//
//   draining ──the deadline, or an abort──► stopping ──nothing left in flight──► done
//   draining ──nothing queued, running or being claimed, every group drained, no settlement on
//              its way──► done
//
// While draining, each turn starts queued jobs in free slots, sends the claims the planner wants
// (and looks again at once), then sleeps until something changes: a handler ends, a claim or
// settlement returns, a notice arrives, a blocked kind's time or the poll comes, the deadline
// passes. Stopping, no claim goes and no job starts: queued jobs are released (attempt refunded),
// running handlers get until their (budget-clipped) timeout; done, every settlement is awaited and
// the report returned — with a budget, once the handlers given up have returned or the budget has
// ended (a Worker's invocation ends with the drain and would cut off what they still do).
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
//   settled by its own statement (SettledByStatement, run-handler.ts)
//                            nothing to settle: its handler snoozed it (pending again at a time,
//                            claimed then if the drain is still open, or waiting for something)
//
// Every "next due" is a pending job's run_at: a retry's backoff and a snooze are kept (due-times.ts)
// so an open drain claims their kinds at that time, and the report says when the earliest is.
import type { JobDefinition, JobRegistry } from '../jobs/registry.ts';
import type { ClaimedJob, Db } from '../queries/index.ts';
import { type OpenTelemetryApi, ProcessSpan, openTelemetry, traceClaim } from '../tracing.ts';
import { BatchRunner } from './batch-runner.ts';
import { ClaimPlanner, type PlannedClaim } from './claim-planner.ts';
import { type KindRunner, claimName } from '../jobs/definition.ts';
import { Claimer } from './claimer.ts';
import { Deadlines } from './deadlines.ts';
import { JobBook, type JobRecord, type SettledCounts } from './job-record.ts';
import { type JobCancelledError, type LeaseLostError, LeaseKeeper } from './lease-keeper.ts';
import type { DrainNotices } from './notices.ts';
import { HandlerAbandonedError, type HandlerEnvironment, runAttempt } from './run-handler.ts';
import { outcomeOf, thrownBy, traceName } from './outcome.ts';
import { Settler } from './settler.ts';
import { DrainSession, type DrainSessionOptions } from './session.ts';

type Prepare = NonNullable<KindRunner['prepare']>;

export { JobCancelledError, LeaseLostError } from './lease-keeper.ts';
export { DRAIN_PROFILES, type DrainProfile, type Placement } from './profiles.ts';
export { MAX_PROGRESS_BYTES, MAX_RESULT_BYTES } from '../db/constants.ts';
export type { OpenTransactionConnection, TransactionConnection } from '../db/connections.ts';
export { DrainNotices, type NoticeListener } from './notices.ts';
export { DueTimes } from './due-times.ts';
export { type JobState, type SettledCounts, noneSettled } from './job-record.ts';
export type { AttemptFailed } from './settler.ts';
export { DrainSession, type DrainSessionOptions } from './session.ts';

/** One drain's own: when it must end. */
export interface DrainRunOptions {
  /** Stop claiming and clip handler timeouts so that the call returns within this. Default: none. */
  budgetMs?: number;
  /** Stop claiming when aborted; in-flight handlers finish (up to their timeout). */
  signal?: AbortSignal;
  /** When aborted (after `signal`, once a shutdown's grace is over): running handlers are given up —
   * their signals abort, the drain stops waiting for them, and their jobs go back to pending at
   * once with their attempt refunded, instead of waiting for the reaper. */
  abandonSignal?: AbortSignal;
}

/** A drain of its own, as one call (a DrainSession built for it). */
export interface DrainOptions extends DrainSessionOptions, DrainRunOptions {}

export interface DrainReport extends SettledCounts {
  claimed: number;
  elapsedMs: number;
  stoppedBy: 'empty' | 'budget' | 'signal';
  /** When a kind whose limits held ready jobs back may be claimed again (epoch ms); null when
   * nothing was held back. A caller that drains again then finds the limit's next room. */
  nextClaimAt: number | null;
  /** When this drain knows something is next due (ms since the epoch), at the earliest: the next
   * pending job's run_at from its last short claim (with reportNextDue), a retry's backoff or a
   * snooze it settled, a limited kind's next claim, or now when it stopped with jobs left (budget,
   * signal). Null: it knows of nothing. */
  nextDueAt: number | null;
}

/** Due times reopen their kinds at most this often (ms): the claim then takes every job due by then. */
const DUE_CLAIM_SPACING_MS = 25;

/** One drain with its own session: for a caller that drains once (a test, run-now). */
export function drain(db: Db, registry: JobRegistry, options: DrainOptions): Promise<DrainReport> {
  return drainIn(new DrainSession(db, registry, options), options);
}

/** A drain in `session` (session.ts): until there is nothing running and nothing to claim, the
 * budget is spent, or `run.signal` aborts. A drainer calls it as often as there may be work. */
export function drainIn(session: DrainSession, run: DrainRunOptions = {}): Promise<DrainReport> {
  return new DrainRun(session, run).run();
}

type Mode = 'draining' | 'stopping' | 'done';

/** One drain call: the loop of the header comment and the state it owns. */
class DrainRun {
  readonly #started = Date.now();
  readonly #session: DrainSession;
  readonly #run: DrainRunOptions;
  readonly #budget: ReturnType<typeof budgetClock>;
  readonly #book: JobBook;
  readonly #planner: ClaimPlanner;
  readonly #claimer: Claimer;
  readonly #settler: Settler;
  readonly #leases: LeaseKeeper;
  readonly #handlerEnvironment: HandlerEnvironment;
  /** Handlers given up that have not returned yet (a drain with a budget only). */
  readonly #givenUpRunning = new Set<Promise<unknown>>();
  /** Hands it a handler given up that may still be running (unset without a budget: none is waited for). */
  readonly #trackGivenUp: ((handler: Promise<unknown>) => void) | undefined;
  /** One timer for every running handler's deadline (deadlines.ts). */
  readonly #deadlines = new Deadlines();
  readonly #unsubscribe: () => void;
  readonly #wakeup = new LoopSleep();
  /** Tracing (src/tracing.ts): the API when the app uses OpenTelemetry, and each claimed job's
   * claim span context. */
  #tracing: OpenTelemetryApi | null = null;
  readonly #claimContexts = new WeakMap<ClaimedJob, ReturnType<typeof traceClaim>>();
  #mode: Mode = 'draining';
  #claimed = 0;
  /** The last claim's error, until a claim succeeds again (the drain throws it if it ends so). */
  #claimError: unknown;
  #stoppedBy: DrainReport['stoppedBy'] = 'empty';
  /** The next due time the last short claim reported (with reportNextDue). */
  #nextDueFromClaims: number | null = null;
  /** When due times last reopened their kinds: such claims go at most every DUE_CLAIM_SPACING_MS,
   * so jobs due a few milliseconds apart (a thousand runs whose sleeps end together) come back in
   * one claim, not one each. */
  #dueClaimedAt = -Infinity;
  #earliestDueAt = Infinity;
  /** One per batch kind drained (src/jobs/batch.ts): their jobs are not the planner's. */
  readonly #runners: BatchRunner[];

  constructor(session: DrainSession, run: DrainRunOptions) {
    const { db, options, profile, recordCounts } = session;
    this.#session = session;
    this.#run = run;
    this.#budget = budgetClock(this.#started, run.budgetMs, run.signal);
    this.#trackGivenUp = Number.isFinite(this.#budget.end) ? (handler) => this.#addGivenUp(handler) : undefined;
    this.#book = new JobBook({
      // Only a settlement that returned frees a limited kind's slot: until then the database counts
      // the job as running, and a claim would be held back by it.
      onDone: (kind) => this.#planner.slotFreed(kind),
      onChange: () => this.#wakeup.wake(),
    });
    this.#planner = new ClaimPlanner(session.registry, this.#book, {
      kinds: session.plannedKinds,
      batchSize: session.batchSize,
      maxBatchSize: session.maxBatchSize,
      concurrency: session.concurrency,
      prefetch: session.prefetch,
      claimsInFlight: profile.claimsInFlight,
      carryCompletions: profile.settleWithClaim,
      claimLimit: options.ids ? new Set(options.ids).size : undefined,
    });
    this.#settler = new Settler(db, {
      recordCounts,
      carryCompletions: profile.settleWithClaim,
      onError: options.onSettleError,
      // Jobs that waited for ours are pending now: this drain runs them too.
      onUnblocked: (kinds) => this.#planner.reopen(kinds),
      onReturned: () => this.#wakeup.wake(),
      // Settlements wait a little for the others' while handlers still run (settler.ts).
      handlersRunning: () => this.#slotsInUse > 0,
      onRetry: (runAt, kind) => this.#dueAgain(runAt.getTime(), kind),
      onFailed: options.onAttemptFailed,
      onSnoozed: (kind, dueAt, readyKinds) => this.#snoozed(kind, dueAt, readyKinds),
      // A settlement that failed for a reason of the moment is sent again while its jobs' lease may
      // still hold (the renewals stopped when their handlers ended), within the drain's budget.
      resendUntil: () => Math.min(this.#budget.end, Date.now() + session.visibilityTimeoutSeconds * 1000),
    });
    this.#claimer = new Claimer(db, this.#settler, {
      recordCounts,
      claimNames: (kinds) => session.registry.claimNames(kinds),
    });
    this.#leases = new LeaseKeeper(db, {
      visibilityTimeoutSeconds: session.visibilityTimeoutSeconds,
      onLostUnstarted: (record, error) => this.#lostBeforeStart(record, error),
    });
    this.#runners = session.batchKinds.map((kind) => this.#batchRunner(session.registry.get(kind)!));
    this.#handlerEnvironment = {
      db,
      transactions: options.transactions,
      progress: (jobId, json) => this.#leases.progress(jobId, json),
      unsavedProgress: (jobId) => this.#leases.unsavedProgress(jobId),
      saveProgress: (jobId) => this.#leases.saveProgress(jobId),
      holdForSettling: (jobId) => this.#leases.holdForSettling(jobId),
      recordCounts,
      deadlines: this.#deadlines,
      outlived: this.#trackGivenUp,
    };
    this.#unsubscribe = this.#listen(options.notices, run.abandonSignal);
  }

  /** The runner of one batch kind, sharing this drain's claimer, settler and leases. */
  #batchRunner(definition: JobDefinition<unknown>): BatchRunner {
    return new BatchRunner(definition, {
      session: this.#session,
      claimer: this.#claimer,
      settler: this.#settler,
      leases: this.#leases,
      handlerDeadline: () => this.#budget.handlerDeadline,
      outlived: this.#trackGivenUp,
      mayClaim: () => this.#mode === 'draining',
      stopping: () => this.#mode !== 'draining',
      tracing: () => this.#tracing,
      onChange: () => this.#wakeup.wake(),
      onClaimed: (n) => {
        this.#claimed += n;
      },
    });
  }

  /** Notices (a kind has ready jobs, a cancel was asked) and the shutdown's abandon; returns the unsubscribe. */
  #listen(notices: DrainNotices | undefined, abandonSignal: AbortSignal | undefined): () => void {
    abandonSignal?.addEventListener(
      'abort',
      () =>
        this.#leases.abandonRunning(
          new HandlerAbandonedError('the drainer shut down before the handler finished; released to run again'),
        ),
      { once: true },
    );
    return (
      notices?.subscribe({
        ready: (kind) => {
          this.#planner.reopen(kind === undefined ? undefined : [kind]);
          for (const runner of this.#runners) if (kind === undefined || runner.kind === kind) runner.reopen();
          this.#wakeup.wake();
        },
        cancelRequested: (jobId) => this.#leases.checkNow(jobId),
      }) ?? (() => {})
    );
  }

  async run(): Promise<DrainReport> {
    this.#tracing = await openTelemetry();
    while (this.#mode !== 'done') {
      const stop = this.#budget.stopReason();
      if (stop && this.#mode === 'draining') this.#stop(stop);
      if (this.#mode === 'draining') this.#drainTurn();
      else this.#stopTurn();
      if (this.#done) break;
      await this.#wakeup.wait(this.#mode === 'stopping' ? Infinity : this.#nextLookAt(), this.#run.signal);
    }
    this.#leases.stop();
    this.#wakeup.stop();
    this.#deadlines.clear();
    this.#unsubscribe();
    await this.#settler.finish();
    await this.#givenUpReturned();
    if (this.#claimError !== undefined) throw this.#claimError;
    const counts = { ...this.#book.counts };
    for (const runner of this.#runners)
      for (const [as, n] of Object.entries(runner.book.counts)) counts[as as keyof SettledCounts] += n;
    const nextClaimAt =
      this.#stoppedBy === 'empty' && Number.isFinite(this.#planner.nextUnblockAt) ? this.#planner.nextUnblockAt : null;
    return {
      claimed: this.#claimed,
      ...counts,
      elapsedMs: Date.now() - this.#started,
      stoppedBy: this.#stoppedBy,
      nextClaimAt,
      nextDueAt: this.#nextDueAt(nextClaimAt),
    };
  }

  /** DrainReport.nextDueAt. */
  #nextDueAt(nextClaimAt: number | null): number | null {
    const known = [
      this.#nextDueFromClaims,
      nextClaimAt,
      this.#stoppedBy === 'empty' ? null : Date.now(),
      Number.isFinite(this.#earliestDueAt) ? this.#earliestDueAt : null,
    ].filter((t): t is number => t !== null);
    return known.length > 0 ? Math.min(...known) : null;
  }

  /** draining: start what fits, claim what the planner wants, and see whether all is done. */
  #drainTurn(): void {
    const { concurrency } = this.#session;
    for (let record: JobRecord | null; this.#slotsInUse < concurrency && (record = this.#book.nextQueued()); )
      this.#start(record);
    for (const runner of this.#runners) {
      // Held open by running handlers: a drained batch kind is looked at again at the poll, as the planner's are.
      if (runner.drained && Date.now() >= runner.drainedAt + this.#session.pollIntervalMs) runner.reopen();
      if (this.#slotsInUse < concurrency) runner.turn();
    }
    // Retries and snoozes of this drain's that are due now: their kinds are claimed again.
    if (Date.now() >= this.#nextDueClaimAt) {
      this.#planner.reopen([...this.#session.dueTimes.takeDue(Date.now())]);
      this.#dueClaimedAt = Date.now();
    }
    // Held open by running handlers: look again for what came due since a claim came back short.
    if (Date.now() >= this.#planner.oldestDrainedAt + this.#session.pollIntervalMs)
      this.#planner.reopenDrainedBefore(Date.now() - this.#session.pollIntervalMs);
    for (let plan: PlannedClaim | null; (plan = this.#planner.next()); ) this.#sendClaim(plan);
    // Settlements still on their way may free a limited kind's slots: wait for them first.
    if (this.#idle && this.#planner.exhausted && this.#runners.every((r) => r.drained) && !this.#settler.busy)
      this.#setMode('draining', 'done');
  }

  /** stopping: release what waits; done once nothing is claimed or running any more. */
  #stopTurn(): void {
    this.#settler.release(this.#book.takeQueued());
    for (const runner of this.#runners) runner.stop();
    if (this.#idle) this.#setMode('stopping', 'done');
  }

  get #done(): boolean {
    return this.#mode === 'done';
  }

  get #idle(): boolean {
    return (
      this.#planner.inFlight === 0 &&
      this.#book.running === 0 &&
      this.#book.queued === 0 &&
      this.#runners.every((r) => !r.busy)
    );
  }

  /** Handlers running: each job's, and one per batch call. */
  get #slotsInUse(): number {
    let calls = 0;
    for (const runner of this.#runners) if (runner.calling) calls++;
    return this.#book.running + calls;
  }

  /** When to look again with nothing else happening: the claim deadline, a blocked kind's time, the poll. */
  #nextLookAt(): number {
    let runners = Infinity;
    for (const r of this.#runners)
      runners = Math.min(runners, r.nextLookAt, r.drainedAt + this.#session.pollIntervalMs);
    return Math.min(
      this.#budget.claimDeadline,
      this.#planner.nextUnblockAt,
      this.#planner.oldestDrainedAt + this.#session.pollIntervalMs,
      this.#nextDueClaimAt,
      runners,
    );
  }

  /** When the due times next reopen their kinds: the earliest, no sooner than the spacing allows. */
  get #nextDueClaimAt(): number {
    return Math.max(this.#session.dueTimes.next, this.#dueClaimedAt + DUE_CLAIM_SPACING_MS);
  }

  /** A job of `kind` this drain settled is due again at `at` (a retry's backoff, a snooze). */
  #dueAgain(at: number, kind: string): void {
    this.#earliestDueAt = Math.min(this.#earliestDueAt, at);
    this.#session.dueTimes.add(at, kind);
  }

  /** Its runner's own statement settled a job of `kind` (a snooze): due again at its time, if it has one. */
  #snoozed(kind: string, dueAt: number | null, readyKinds: readonly string[]): void {
    if (dueAt !== null) this.#dueAgain(dueAt, kind);
    // Jobs the statement enqueued: this drain runs them too.
    if (readyKinds.length > 0) this.#planner.reopen(readyKinds);
  }

  /** A handler it gave up that may still be running (only with a budget): see #givenUpReturned(). */
  #addGivenUp(handler: Promise<unknown>): void {
    const returned: Promise<unknown> = handler.then(
      () => this.#givenUpRunning.delete(returned),
      () => this.#givenUpRunning.delete(returned),
    );
    this.#givenUpRunning.add(returned);
  }

  /** Handlers it gave up get until the budget's end to return. Their jobs are settled already, but
   * a Worker's invocation ends with the drain and cuts off whatever they still do — their reaction
   * to ctx.signal, a report, a cleanup — and the budget's last half-margin is theirs. */
  async #givenUpReturned(): Promise<void> {
    const left = this.#budget.end - Date.now();
    if (this.#givenUpRunning.size === 0 || !(left > 0)) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.allSettled(this.#givenUpRunning), new Promise((r) => (timer = setTimeout(r, left)))]);
    clearTimeout(timer);
  }

  #stop(reason: DrainReport['stoppedBy']): void {
    this.#stoppedBy = reason;
    this.#setMode('draining', 'stopping');
  }

  #setMode(from: Mode, to: Mode): void {
    if (this.#mode !== from) throw new Error(`drain: cannot go from ${this.#mode} to ${to}`);
    this.#mode = to;
  }

  #start(record: JobRecord): void {
    record.start();
    const { job } = record;
    const startedAt = performance.now();
    const claimContext = this.#tracing ? this.#claimContexts.get(job) : undefined;
    const span = this.#tracing && claimContext ? new ProcessSpan(this.#tracing, job, claimContext) : undefined;
    void runAttempt(
      this.#session.registry,
      job,
      this.#budget.handlerDeadline,
      this.#handlerEnvironment,
      (giveUp) => this.#leases.attach(job.id, giveUp),
      span,
      record.prepared,
    ).then((outcome) => {
      this.#planner.handlerTook(performance.now() - startedAt);
      const progressJson = this.#leases.drop(job.id);
      span?.end(traceName(outcome), thrownBy(outcome));
      this.#settler.settle(record, outcome, this.#session.registry.get(record.kind, record.job.version), progressJson);
    });
  }

  #sendClaim(plan: PlannedClaim): void {
    const sentAt = Date.now(); // the lock's time is the claim's, at the latest
    const claim = this.#session.claimRequest(plan.size, plan.kinds, this.#session.options.reportNextDue);
    const sent = this.#claimer.send(claim, plan.limits);
    // Only a drain of kinds whose runners prepare their jobs waits for that.
    const claimed =
      this.#session.preparing.size === 0
        ? sent.then((outcome) => ({ outcome, prepared: undefined }))
        : sent.then(async (outcome) => ({ outcome, prepared: await this.#prepare(outcome.jobs) }));
    claimed
      .then(
        ({ outcome, prepared }) => {
          const records = this.#book.claimed(outcome.jobs, sentAt, prepared);
          this.#planner.claimReturned(plan, outcome, Date.now() - sentAt);
          if (outcome.nextDueAt !== undefined && outcome.jobs.length < plan.size)
            this.#nextDueFromClaims = outcome.nextDueAt?.getTime() ?? null;
          this.#session.claimed(outcome.jobs, sentAt);
          this.#claimError = undefined;
          this.#claimed += outcome.jobs.length;
          if (this.#tracing && outcome.jobs.length > 0) {
            const context = traceClaim(
              this.#tracing,
              [...new Set(outcome.jobs.map((j) => j.kind))],
              outcome.jobs.length,
              sentAt,
            );
            for (const job of outcome.jobs) this.#claimContexts.set(job, context);
          }
          this.#leases.hold(records);
        },
        (error: unknown) => {
          // Tried again at the next poll while handlers hold the drain open; thrown if it ends so.
          this.#planner.claimReturned(plan, null, 0);
          this.#claimError = error;
          this.#session.options.onClaimError?.(error);
        },
      )
      .finally(() => this.#wakeup.wake());
  }

  /** What the kinds' runners prepare for a claim's jobs before any of them starts (KindRunner.prepare),
   * by job id; a failure is theirs to make up for, job by job, and does not hold the jobs back. */
  async #prepare(claimed: readonly ClaimedJob[]): Promise<ReadonlyMap<string, unknown> | undefined> {
    let byRunner: Map<Prepare, ClaimedJob[]> | undefined;
    for (const job of claimed) {
      const prepare = this.#session.preparing.get(claimName(job.kind, job.version ?? 1));
      if (!prepare) continue;
      byRunner ??= new Map();
      const jobs = byRunner.get(prepare);
      if (jobs) jobs.push(job);
      else byRunner.set(prepare, [job]);
    }
    if (!byRunner) return undefined;
    const prepared = new Map<string, unknown>();
    await Promise.all(
      [...byRunner].map(async ([prepare, jobs]) => {
        for (const [id, value] of await prepare(this.#session.db, jobs).catch(() => new Map<string, unknown>()))
          prepared.set(id, value);
      }),
    );
    return prepared;
  }

  /** Its lease was lost before it started (whoever holds it now runs it), or someone cancelled it
   * (it ends cancelled without running). */
  #lostBeforeStart(record: JobRecord, error: LeaseLostError | JobCancelledError): void {
    if (record.state !== 'claimed') return;
    const outcome = outcomeOf(record.job, error);
    if (outcome.as === 'cancelled')
      this.#settler.settle(record, outcome, this.#session.registry.get(record.kind, record.job.version));
    else record.forget();
  }
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
    /** What is left after the handlers' deadline is for settling, and for handlers given up to return. */
    end: started + budgetMs,
    stopReason: (): DrainReport['stoppedBy'] | null =>
      signal?.aborted ? 'signal' : Date.now() >= claimDeadline ? 'budget' : null,
  };
}

/** The loop's sleep: until wake() (a handler ended, a claim or settlement returned), its deadline,
 * or the drain's abort. A wake with nobody asleep is not kept: the loop looks at its state before it
 * sleeps. It is woken often, so a turn costs a promise and no more: the timer stays armed across
 * turns while the deadline holds (one armed for an earlier time wakes the loop once early, which
 * only costs a turn), and the abort is listened to once. stop() clears both. */
class LoopSleep {
  #resolve: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.wake();

  wake(): void {
    const resolve = this.#resolve;
    this.#resolve = undefined;
    resolve?.();
  }

  wait(deadline: number, signal?: AbortSignal): Promise<void> {
    if (signal && !this.#signal) {
      this.#signal = signal;
      signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    if (deadline < this.#timerAt) {
      if (this.#timer !== undefined) clearTimeout(this.#timer);
      this.#timerAt = deadline;
      this.#timer = setTimeout(() => this.#rang(), Math.max(0, deadline - Date.now()));
    }
    return new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
  }

  stop(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }

  #rang(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.wake();
  }
}
