// The batch runner: how the drain runs a batch kind (src/jobs/batch.ts) — up to `size` jobs per
// handler call, each settled on its own. One runner per batch kind in a drain, one call at a time
// (a call takes one of the drain's slots, whatever its size). A cycle:
//
//   claiming ──claim of up to `size` (the plain or the limited claim, as for any kind)──►
//     nothing came back ──► drained (until a notice or the poll reopens it)
//     fewer than `size`, waitMs > 0 ──► gathering a fuller batch: claims the rest when a notice
//                                        arrives or `waitMs` after the first claim, then calls
//     otherwise ──► calling
//   calling ──the handler's answer, one outcome per item──► each item completed (its result kept
//             where the kind keeps results) or failed alone (retried by the kind's rule); a throw,
//             a timeout or an answer of another length fails every item
//
// Each item keeps its own lease (renewed by the lease keeper; lost: its outcome is dropped and its
// settlement is refused by the lock token), cancel (it ends cancelled, whatever the call answers)
// and trace span. A drain that stops while a batch waits releases its jobs (attempts refunded).
// The runner has a job book of its own, so its items never take the slots the claim planner
// counts for the other kinds.
import { handlerTimeoutMs, type JobDefinition } from '../jobs/registry.ts';
import { batchOf } from '../jobs/batch.ts';
import { type KindLimits, limitsOf } from '../jobs/definition.ts';
import type { ClaimedJob } from '../queries/index.ts';
import { type OpenTelemetryApi, ProcessSpan, traceClaim } from '../tracing.ts';
import type { Claimer } from './claimer.ts';
import { JobBook, type JobRecord } from './job-record.ts';
import type { LeaseKeeper } from './lease-keeper.ts';
import { type Outcome, outcomeOf, thrownBy, traceName } from './outcome.ts';
import { keptResult, payloadOf, timeLimit } from './run-handler.ts';
import type { DrainSession } from './session.ts';
import type { Settler } from './settler.ts';

export interface BatchRunnerDeps {
  /** The drain's session (session.ts): its claims' lock tokens, ids (run-now) and visibility, and
   * whom a claim tells. */
  session: DrainSession;
  claimer: Claimer;
  settler: Settler;
  leases: LeaseKeeper;
  /** When handlers must be done by (the drain's budget), and whether claims may still go. */
  handlerDeadline: () => number;
  /** A batch call given up for its time that may still be running: the drain waits for it until its budget ends. */
  outlived?: (handler: Promise<unknown>) => void;
  mayClaim: () => boolean;
  /** Stopping: a waiting batch is released. */
  stopping: () => boolean;
  tracing: () => OpenTelemetryApi | null;
  /** A claim brought `n` jobs back (the drain's count). */
  onClaimed: (n: number) => void;
  /** Something changed: the drain loop looks again. */
  onChange: () => void;
}

type Phase = 'idle' | 'claiming' | 'gathering' | 'calling';

export class BatchRunner {
  readonly kind: string;
  readonly #definition: JobDefinition<unknown>;
  readonly #size: number;
  readonly #waitMs: number;
  readonly #limits: KindLimits | undefined;
  readonly #deps: BatchRunnerDeps;
  /** Its own book: its jobs are not the planner's. */
  readonly book: JobBook;
  #phase: Phase = 'idle';
  #drained = false;
  #drainedAt = 0;
  /** Times reopen() was called: a claim that found too little after one may have read the
   * database before the announced jobs were there, and does not drain the kind. */
  #reopened = 0;
  /** While waiting for a fuller batch: when it stops waiting, and how to wake it early. */
  #waitUntil = Infinity;
  #wakeWait: (() => void) | null = null;
  /** A limited kind held back by its limits: not before this. */
  #blockedUntil = 0;

  constructor(definition: JobDefinition<unknown>, deps: BatchRunnerDeps) {
    const batch = batchOf(definition)!;
    this.kind = definition.kind;
    this.#definition = definition;
    const { ids } = deps.session.options;
    this.#size = ids ? Math.min(batch.size, ids.length) : batch.size;
    this.#waitMs = ids ? 0 : batch.waitMs;
    this.#limits = limitsOf(definition) ?? undefined;
    this.#deps = deps;
    this.book = new JobBook({ onChange: deps.onChange });
  }

  /** A cycle is on: claiming, waiting for a fuller batch, or its call is running. */
  get busy(): boolean {
    return this.#phase !== 'idle' || this.book.live > 0;
  }

  /** Its last claim found nothing (or too little to wait for): nothing to do until reopened. */
  get drained(): boolean {
    return this.#drained;
  }

  /** A handler call of it is running (it takes one of the drain's slots). */
  get calling(): boolean {
    return this.#phase === 'calling';
  }

  /** When the loop should look at it again on its own: its wait's end, or its limits' next room. */
  get nextLookAt(): number {
    return Math.min(
      this.#phase === 'gathering' ? this.#waitUntil : Infinity,
      this.#blockedUntil > Date.now() ? this.#blockedUntil : Infinity,
    );
  }

  get drainedAt(): number {
    return this.#drained ? this.#drainedAt : Infinity;
  }

  /** Jobs of the kind may be ready: claim again (a waiting batch claims the rest now). */
  reopen(): void {
    if (this.#deps.session.options.ids && this.#drained) return;
    this.#drained = false;
    this.#reopened++;
    this.#wakeWait?.();
  }

  /** The drain is stopping: a batch waiting for more jobs stops waiting (its jobs are released). */
  stop(): void {
    this.#wakeWait?.();
  }

  /** Starts a cycle if none is on, it is not drained, and the drain may claim (and has a slot: the caller's check). */
  turn(): void {
    if (this.#phase !== 'idle' || this.#drained || !this.#deps.mayClaim() || Date.now() < this.#blockedUntil) return;
    this.#phase = 'claiming';
    void this.#cycle().finally(() => {
      this.#phase = 'idle';
      this.#deps.onChange();
    });
  }

  async #cycle(): Promise<void> {
    const reopenedAtClaim = this.#reopened;
    const records = await this.#claim(this.#size);
    if (records.length === 0) return this.#markDrained(reopenedAtClaim);
    if (records.length < this.#size && this.#waitMs > 0) {
      this.#phase = 'gathering';
      this.#waitUntil = records[0]!.claimSentAt + this.#waitMs;
      while (records.length < this.#size && Date.now() < this.#waitUntil && !this.#deps.stopping()) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.max(0, this.#waitUntil - Date.now()));
          this.#wakeWait = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.#wakeWait = null;
        if (this.#deps.stopping() || !this.#deps.mayClaim()) break;
        records.push(...(await this.#claim(this.#size - records.length)));
      }
      this.#waitUntil = Infinity;
    }
    // Jobs lost or cancelled while the batch waited were settled by the drain already.
    const held = records.filter((r) => r.state === 'claimed');
    if (this.#deps.stopping()) {
      this.#deps.settler.release(
        held,
        'the drainer stopped while the batch waited for more jobs; released to run again',
      );
      for (const r of held) this.#deps.leases.drop(r.job.id);
      return;
    }
    // A short batch had no more to wait for: nothing more is ready now.
    if (records.length < this.#size) this.#markDrained(reopenedAtClaim);
    if (held.length === 0) return;
    this.#phase = 'calling';
    await this.#call(held);
  }

  #markDrained(reopenedAtClaim: number): void {
    if (this.#reopened !== reopenedAtClaim) return;
    this.#drained = true;
    this.#drainedAt = Date.now();
  }

  /** One claim of up to `n` jobs of the kind, held by the lease keeper. */
  async #claim(n: number): Promise<JobRecord[]> {
    const { session, claimer, leases } = this.#deps;
    const sentAt = Date.now();
    try {
      const outcome = await claimer.send(session.claimRequest(n, [this.kind]), this.#limits);
      if (outcome.heldBack)
        this.#blockedUntil = outcome.nextStartAt ? outcome.nextStartAt.getTime() : Date.now() + 1_000;
      const records = this.book.claimed(outcome.jobs, sentAt);
      this.#deps.onClaimed(records.length);
      if (records.length > 0) leases.hold(records);
      session.claimed(outcome.jobs, sentAt);
      return records;
    } catch (error) {
      session.options.onClaimError?.(error);
      this.#blockedUntil = Date.now() + 1_000;
      return [];
    }
  }

  /** One handler call for `records`, each settled on its own. */
  async #call(records: JobRecord[]): Promise<void> {
    const batch = batchOf(this.#definition)!;
    const controller = new AbortController();
    const givenUp = new Map<string, Error>();
    const tracing = this.#deps.tracing();
    const claimContext = tracing
      ? traceClaim(tracing, [this.kind], records.length, records[0]!.claimSentAt)
      : undefined;
    const spans = new Map<string, ProcessSpan>();
    const items: { record: JobRecord; payload: unknown; own: AbortController }[] = [];
    for (const record of records) {
      record.start();
      if (tracing && claimContext) spans.set(record.job.id, new ProcessSpan(tracing, record.job, claimContext));
      // Each item's own signal aborts when it alone is given up; the call's, when every item is.
      const own = new AbortController();
      this.#deps.leases.attach(record.job.id, (error) => {
        givenUp.set(record.job.id, error);
        own.abort(error);
        if (givenUp.size === records.length) controller.abort(error);
      });
      try {
        items.push({ record, payload: payloadOf(this.#definition, record.job), own });
      } catch (refused) {
        this.#settle(record, refused as Error, spans, givenUp);
      }
    }
    controller.signal.addEventListener(
      'abort',
      () => {
        for (const { own } of items) if (!own.signal.aborted) own.abort(controller.signal.reason);
      },
      { once: true },
    );
    if (items.length === 0) return;
    // The call's timeout: the kind's (the shortest any of its jobs asked for), within the drain's budget.
    const timeoutMs = Math.min(...items.map((i) => handlerTimeoutMs(this.#definition, i.record.job.timeoutMs)));
    const limit = timeLimit(timeoutMs, this.#deps.handlerDeadline(), 'batch handler');
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = limit.error();
        controller.abort(error);
        reject(error);
      }, limit.allowedMs);
    });
    let answer: unknown[] | Error;
    let call: Promise<unknown> | undefined;
    try {
      call = Promise.resolve().then(() =>
        batch.handler(
          items.map((i) => ({ payload: i.payload, job: i.record.job, signal: i.own.signal })),
          { signal: controller.signal },
        ),
      );
      call.catch(() => {});
      const value = await Promise.race([call, timedOut]);
      answer =
        Array.isArray(value) && value.length === items.length
          ? value
          : new Error(
              `batch handler of ${this.kind} answered ${
                Array.isArray(value) ? `${value.length} outcomes` : `a ${typeof value}`
              } for ${items.length} jobs; it must answer one outcome per job, in order`,
            );
    } catch (error) {
      answer = error instanceof Error ? error : new Error(String(error));
      if (call && controller.signal.aborted) this.#deps.outlived?.(call);
    } finally {
      clearTimeout(timer);
    }
    for (const [i, item] of items.entries()) {
      this.#settle(item.record, answer instanceof Error ? answer : (answer as unknown[])[i], spans, givenUp);
    }
  }

  /** One item's end, settled as any attempt's: its lease given up (cancelled, lost) wins over what
   * the call answered; an Error is its failure; anything else its result. */
  #settle(record: JobRecord, answer: unknown, spans: Map<string, ProcessSpan>, givenUp: Map<string, Error>): void {
    const { job } = record;
    const progressJson = this.#deps.leases.drop(job.id);
    const outcome = this.#outcome(job, givenUp.get(job.id) ?? answer);
    spans.get(job.id)?.end(traceName(outcome), thrownBy(outcome));
    this.#deps.settler.settle(record, outcome, this.#definition, progressJson);
  }

  #outcome(job: ClaimedJob, answer: unknown): Outcome {
    if (answer instanceof Error) return outcomeOf(job, answer);
    try {
      return { as: 'completed', kept: keptResult(this.#definition, answer) };
    } catch (problem) {
      return outcomeOf(job, problem);
    }
  }
}

export type { ClaimedJob };
