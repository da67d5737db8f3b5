// The settler: what happens to a job once its attempt has run (or will not run), batched. It owns
// the buffers of completions and failures and every settlement statement in flight, and it alone
// moves a record from settling to done (job-record.ts), saying what the statement made of it.
// settle(record, outcome) is the one turn of an attempt's Outcome (outcome.ts) into its settlement:
//
//   complete(record) ─► buffered ─► one statement for whatever finished meanwhile: DELETE, or UPDATE
//                                   to completed for kinds that keep their jobs, and to cancelled for
//                                   jobs someone asked to cancel (or, far from the database, carried
//                                   by the next claim's statement: carry())
//   settledInTransaction(record)    a transactional handler completed it itself: done at once
//   snoozed(record)                 its kind's runner settled it with a statement of its own: done at once
//   fail(record, …)  ─► buffered ─► one UPDATE: retry with backoff, or dead
//   release(records) ─► at once  ─► one UPDATE: back to pending, attempt refunded (never started, or
//                                   abandoned at shutdown: `reason` goes into last_error)
//
// A statement the database rolled back for a lock conflict (a deadlock, a serialization failure)
// is sent again, up to SETTLE_ATTEMPTS times. One that failed for a reason of the moment (the
// database out of reach, a connection lost, too many clients, a full disk) is sent again with a
// growing pause until `resendUntil` (the drain: its jobs' lease, within its budget): a blip shorter
// than the lease costs no repeated work. The lock token still fences each resend, so one whose jobs
// were reaped meanwhile settles nothing (lost), and one whose first send committed after all finds
// them settled. A statement that fails otherwise, or past that time, leaves its jobs running for
// the reaper (onError says so) and its records done, settled as nothing. finish() flushes what is
// buffered and resolves when every statement has returned.
import {
  type Backoff,
  type CompletedJob,
  type CompletionReport,
  type Db,
  type Failure,
  completeFollowed,
  completeJobs,
  failJobs,
  release,
} from '../queries/index.ts';
import { isTransientConflict, isTransientFailure } from '../db/errors.ts';
import type { JobDefinition } from '../jobs/registry.ts';
import { limitsOf } from '../jobs/definition.ts';
import type { JobRecord, SettledAs } from './job-record.ts';
import { errorText } from '../json.ts';
import type { Kept, Outcome } from './outcome.ts';
import { cancelledKept } from './run-handler.ts';

/** A settlement statement rolled back by a lock conflict is sent at most this many times in all. */
export const SETTLE_ATTEMPTS = 3;

export interface SettlerOptions {
  /** Count settled jobs in job_counts (the dashboard's chart, /metrics). */
  recordCounts: boolean;
  /** Completions wait for the next claim's statement to carry them while a claim is in flight
   * (see DrainProfile.settleWithClaim). */
  carryCompletions: boolean;
  /** A settlement statement failed: its jobs stay running for the reaper. */
  onError?: (error: unknown) => void;
  /** Completions made jobs of these kinds pending (they were waiting for them): claim again. */
  onUnblocked?: (kinds: readonly string[]) => void;
  /** A statement returned (the drain may have more to do). */
  onReturned?: () => void;
  /** A failed job of `kind` goes back to pending, due again at `runAt` (its backoff). */
  onRetry?: (runAt: Date, kind: string) => void;
  /** The failing statement recorded a failed attempt: retried at `runAt`, or dead (null). */
  onFailed?: (failed: AttemptFailed) => void;
  /** A job of `kind` its runner snoozed: due again at `dueAt` (null: something else makes it due);
   * its statement made jobs of `readyKinds` ready. */
  onSnoozed?: (kind: string, dueAt: number | null, readyKinds: readonly string[]) => void;
  /** Other handlers of the drain still run (more settlements come soon): a settlement may wait for
   * them (SETTLE_SPACING_MS). Unset: every settlement goes out at once. */
  handlersRunning?: () => boolean;
  /** Until when (ms since the epoch, asked at a statement's first failure) a settlement that failed
   * for a reason of the moment is sent again; unset: it is not. */
  resendUntil?: () => number;
  /** The settlement statements (default: src/queries' on `db`); a unit test passes its own. */
  statements?: SettlementStatements;
}

/** The statements a settler sends. */
export interface SettlementStatements {
  completeJobs: typeof completeJobs;
  completeFollowed: typeof completeFollowed;
  failJobs: typeof failJobs;
  release: typeof release;
}

const QUERIES: SettlementStatements = { completeJobs, completeFollowed, failJobs, release };

export type { Kept } from './outcome.ts';

/** An attempt that failed, as its settlement recorded it. */
export interface AttemptFailed {
  id: string;
  kind: string;
  /** Its number (the job's attempts so far, this one included). */
  attempt: number;
  maxAttempts: number;
  /** What it threw, as the job's last_error keeps it. */
  error: string;
  /** When it runs again; null: it is dead (its last attempt, or a permanent error). */
  runAt: Date | null;
}

/** A record to complete, and how it is kept. */
export interface CompletionOf {
  record: JobRecord;
  kept?: Kept;
}

export class Settler {
  readonly #db: Db;
  readonly #options: SettlerOptions;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #completions: SettlementBatcher<CompletionOf>;
  readonly #failures: SettlementBatcher<{ record: JobRecord; failure: Failure }>;
  #claimsInFlight = 0;

  readonly #statements: SettlementStatements;

  constructor(db: Db, options: SettlerOptions) {
    this.#db = db;
    this.#options = options;
    const statements = (this.#statements = options.statements ?? QUERIES);
    const counted = { recordCounts: options.recordCounts };
    const othersComing = options.handlersRunning ?? (() => false);
    this.#completions = new SettlementBatcher(
      (work) => this.#track(work),
      (batch) => this.#complete(batch, () => statements.completeJobs(db, batch.map(completedJob), counted)),
      { holdWhile: () => options.carryCompletions && this.#claimsInFlight > 0, othersComing },
    );
    this.#failures = new SettlementBatcher(
      (work) => this.#track(work),
      (batch) =>
        this.#settle(
          batch.map((b) => b.record),
          () =>
            statements.failJobs(
              db,
              batch.map((b) => b.failure),
              counted,
            ),
          ({ outcomes, unblockedKinds }) => {
            // Jobs that waited for one that died may be pending now: this drain runs them too.
            if (unblockedKinds.length > 0) options.onUnblocked?.(unblockedKinds);
            return outcomes.map((o, i): SettledAs => {
              const { record, failure } = batch[i]!;
              if (o.outcome === 'retry' || o.outcome === 'dead')
                options.onFailed?.({
                  id: record.job.id,
                  kind: record.kind,
                  attempt: o.attempts,
                  maxAttempts: record.job.maxAttempts,
                  error: failure.error,
                  runAt: o.outcome === 'retry' ? o.runAt : null,
                });
              if (o.outcome !== 'retry') return o.outcome;
              options.onRetry?.(o.runAt, record.kind);
              return 'failed';
            });
          },
        ),
      { othersComing },
    );
  }

  /** Settles `record` as its attempt's `outcome` says (`progressJson`: its last progress report
   * not yet saved, kept with a kept job's completion). */
  settle(record: JobRecord, outcome: Outcome, definition: JobDefinition<any> | undefined, progressJson?: string): void {
    // A limited kind's running row holds a slot of its limit for every drainer: it goes at once.
    const urgent = limitsOf(definition) !== null;
    switch (outcome.as) {
      case 'completed':
        if (outcome.inTransaction) this.settledInTransaction(record, outcome.inTransaction.unblockedKinds);
        else
          this.complete(
            record,
            outcome.kept && progressJson !== undefined ? { ...outcome.kept, progressJson } : outcome.kept,
            'completed',
            urgent,
          );
        break;
      case 'cancelled':
        // Someone asked to cancel it: the completing statement ends it cancelled (kept like a
        // completed job of its kind, without a result).
        this.complete(record, cancelledKept(definition), 'cancelled', urgent);
        break;
      case 'released':
        this.release([record], outcome.reason);
        break;
      case 'snoozed':
        this.snoozed(record);
        this.#options.onSnoozed?.(record.kind, outcome.dueAt, outcome.readyKinds);
        break;
      default:
        // Failed, or lost: the failing statement retries it, makes it dead, or is refused by the token.
        this.fail(record, outcome, definition?.backoff, urgent);
    }
  }

  /** Completes it (its kind keeps it: for how long, and the result). `cancelled`: someone asked to
   * cancel it; the completing statement ends it cancelled. `urgent`: its statement does not wait
   * the spacing (SETTLE_SPACING_MS). */
  complete(record: JobRecord, kept?: Kept, outcome: 'completed' | 'cancelled' = 'completed', urgent = false): void {
    record.finish(outcome);
    this.#completions.add({ record, kept }, urgent);
  }

  /** A transactional handler completed it in its own transaction (which made jobs of
   * `unblockedKinds` pending). */
  settledInTransaction(record: JobRecord, unblockedKinds: readonly string[] = []): void {
    record.finish('completed');
    record.settled('completed');
    if (unblockedKinds.length > 0) this.#options.onUnblocked?.(unblockedKinds);
    this.#options.onReturned?.();
  }

  /** Its runner's own statement settled it (pending again later, or waiting). */
  snoozed(record: JobRecord): void {
    record.finish('snoozed');
    record.settled('snoozed');
    this.#options.onReturned?.();
  }

  fail(
    record: JobRecord,
    outcome: Extract<Outcome, { as: 'failed' | 'lost' }>,
    backoff: Backoff | undefined,
    urgent = false,
  ): void {
    record.finish('failed');
    const { job } = record;
    this.#failures.add(
      {
        record,
        failure: {
          id: job.id,
          lockedBy: job.lockedBy,
          ...(outcome.as === 'failed'
            ? { error: outcome.error, permanent: outcome.permanent, retryAfterSeconds: outcome.retryAfterSeconds }
            : { error: errorText(outcome.thrown), permanent: false }),
          backoff,
        },
      },
      urgent,
    );
  }

  release(records: readonly JobRecord[], reason?: string): void {
    if (records.length === 0) return;
    for (const r of records) r.finish('released');
    this.#track(
      this.#settle(
        records,
        () =>
          this.#statements.release(
            this.#db,
            records.map((r) => r.job),
            reason,
          ),
        (ids) => {
          const released = new Set(ids);
          return records.map((r): SettledAs => (released.has(r.job.id) ? 'released' : 'lost'));
        },
      ),
    );
  }

  /**
   * A claim, sent by `send` with the completions waiting for it to carry (far from the database:
   * one round trip settles and claims). While the claim is on its way, new completions wait to ride
   * the next one. `send` answers which of them its statement settled; the others (something follows
   * their end, or they are no longer ours) go through the statement with what follows; if it fails,
   * they were rolled back with it and settle on their own.
   */
  async carry<T>(
    send: (completed: CompletedJob[]) => Promise<{ answer: T; completedIds: readonly string[] }>,
  ): Promise<T> {
    this.#claimsInFlight++;
    try {
      const carried = this.#options.carryCompletions ? this.#completions.take() : [];
      let sent: { answer: T; completedIds: readonly string[] };
      try {
        sent = await send(carried.map(completedJob));
      } catch (error) {
        if (carried.length > 0) this.#completions.taken(carried);
        throw error;
      }
      if (carried.length > 0) this.#carried(carried, sent.completedIds);
      return sent.answer;
    } finally {
      this.#claimsInFlight--;
      this.#completions.nudge();
    }
  }

  #carried(carried: readonly CompletionOf[], completedIds: readonly string[]): void {
    const settled = new Set(completedIds);
    for (const c of carried) if (settled.has(c.record.job.id)) c.record.settled('completed');
    this.#completions.taken();
    const rest = carried.filter((c) => !settled.has(c.record.job.id));
    if (rest.length > 0)
      this.#track(
        this.#complete(rest, () =>
          this.#statements.completeFollowed(this.#db, rest.map(completedJob), {
            recordCounts: this.#options.recordCounts,
          }),
        ),
      );
  }

  /** Settlements are buffered or in flight. */
  get busy(): boolean {
    return this.#inFlight.size > 0 || this.#completions.size > 0 || this.#failures.size > 0;
  }

  /** Flushes what is buffered; resolves when every settlement statement has returned. */
  async finish(): Promise<void> {
    this.#completions.flush(true);
    this.#failures.flush(true);
    while (this.#inFlight.size > 0) {
      await Promise.all([...this.#inFlight]);
      this.#completions.flush(true);
      this.#failures.flush(true);
    }
  }

  /** A completing statement for `batch`: each record as it ended, the others lost. */
  #complete(batch: readonly CompletionOf[], statement: () => Promise<CompletionReport>): Promise<void> {
    return this.#settle(
      batch.map((c) => c.record),
      statement,
      ({ ended, unblockedKinds }) => {
        if (unblockedKinds.length > 0) this.#options.onUnblocked?.(unblockedKinds);
        const how = new Map(ended.map((e) => [e.id, e.status]));
        return batch.map((c): SettledAs => how.get(c.record.job.id) ?? 'lost');
      },
    );
  }

  /** Sends `statement` (again, on a lock conflict) and settles `records` by what `read` makes of its
   * answer — or as nothing when it failed: they stay running for the reaper. */
  async #settle<T>(
    records: readonly JobRecord[],
    statement: () => Promise<T>,
    read: (answer: T) => SettledAs[],
  ): Promise<void> {
    let settledAs: (SettledAs | null)[] = records.map(() => null);
    try {
      settledAs = read(await resend(statement, this.#options.resendUntil));
    } finally {
      for (const [i, r] of records.entries()) r.settled(settledAs[i] ?? null);
    }
  }

  #track(work: Promise<void>): void {
    const done = work
      .catch((error: unknown) => this.#options.onError?.(error))
      .finally(() => {
        this.#inFlight.delete(done);
        this.#options.onReturned?.();
      });
    this.#inFlight.add(done);
  }
}

/** What the completing statements take of a record. */
const completedJob = ({ record, kept }: CompletionOf): CompletedJob => ({
  id: record.job.id,
  lockedBy: record.job.lockedBy,
  ...kept,
});

/** `statement()`, sent again (after a short random pause) while the database rolls it back for a
 * lock conflict, and (after a growing one) while it fails for a reason of the moment, until
 * `resendUntil()`. */
async function resend<T>(statement: () => Promise<T>, resendUntil?: () => number): Promise<T> {
  let conflicts = 0;
  let failures = 0;
  let until: number | undefined;
  for (;;) {
    try {
      return await statement();
    } catch (error) {
      let pause: number;
      if (isTransientConflict(error) && ++conflicts < SETTLE_ATTEMPTS) pause = 5 + Math.random() * 20 * conflicts;
      else if (resendUntil && isTransientFailure(error)) {
        until ??= resendUntil();
        pause = Math.min(RESEND_MAX_PAUSE_MS, 100 * 2 ** failures++) * (0.5 + Math.random() / 2);
        if (Date.now() + pause >= until) throw error;
      } else throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** The longest pause between two sends of a settlement that failed for a reason of the moment. */
const RESEND_MAX_PAUSE_MS = 2_000;

/** While other handlers of the drain still run, a batcher's settlement statements start at most this
 * often (ms): jobs that finish a few at a time (handlers of a few milliseconds, a small concurrency)
 * share a statement and its transaction instead of each few sending their own — a quarter to a third
 * of the PostgreSQL CPU per job of such a drain (docs/benchmark.md, the scale-out row). A settlement
 * goes out at once when no other handler runs (nothing would join it: a chain of jobs run one after
 * another is not slowed), when a full batch waits, when it holds a job of a kind limited across
 * drainers (its running row holds a slot of the limit), and at finish(). */
export const SETTLE_SPACING_MS = 20;
/** So many waiting items go out at once, whatever the spacing. */
const SETTLE_FULL_BATCH = 100;

/**
 * Buffers items and settles them with one statement at a time. A flush waits for the next
 * macrotask, so handlers that finish in the same burst share one statement instead of the first
 * going alone; while a statement is in flight, new items wait for the next one, which starts
 * SETTLE_SPACING_MS after the last at the soonest. `take()` hands the buffer to another statement
 * (a claim) instead, counting as in flight until `taken()`, which gives back what that statement
 * could not settle; `holdWhile` keeps items for such a statement.
 */
class SettlementBatcher<T> {
  #buffer: T[] = [];
  #inFlight = false;
  #scheduled = false;
  #lastSentAt = Number.NEGATIVE_INFINITY;
  /** An item waits that must not wait the spacing. */
  #urgent = false;
  readonly #track: (work: Promise<void>) => void;
  readonly #run: (batch: T[]) => Promise<void>;
  readonly #holdWhile: () => boolean;
  readonly #othersComing: () => boolean;

  constructor(
    track: (work: Promise<void>) => void,
    run: (batch: T[]) => Promise<void>,
    {
      holdWhile = () => false,
      othersComing = () => false,
    }: { holdWhile?: () => boolean; othersComing?: () => boolean },
  ) {
    this.#track = track;
    this.#run = run;
    this.#holdWhile = holdWhile;
    this.#othersComing = othersComing;
  }

  get size(): number {
    return this.#buffer.length;
  }

  /** `urgent`: it goes with the next statement, which does not wait the spacing for it. */
  add(item: T, urgent = false): void {
    this.#buffer.push(item);
    this.#urgent ||= urgent;
    if (!this.#inFlight) this.nudge();
  }

  /** Settle what waits, soon, unless it is held or taken first. */
  nudge(): void {
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    if (this.#scheduled || this.#buffer.length === 0 || this.#holdWhile()) return;
    this.#scheduled = true;
    setTimeout(() => {
      this.#scheduled = false;
      this.flush();
    }, delayMs);
  }

  /** Sends what waits unless a statement is in flight — or, `now` false, the last one started less
   * than the spacing ago while other settlements are coming and nothing urgent or a full batch
   * waits: then when the spacing is over. */
  flush(now = false): void {
    if (this.#inFlight || this.#buffer.length === 0) return;
    const wait = this.#lastSentAt + SETTLE_SPACING_MS - performance.now();
    if (!now && wait > 0 && !this.#urgent && this.#buffer.length < SETTLE_FULL_BATCH && this.#othersComing()) {
      this.#schedule(wait);
      return;
    }
    this.#inFlight = true;
    this.#lastSentAt = performance.now();
    this.#urgent = false;
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
    this.#lastSentAt = performance.now();
    this.#urgent = false;
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
