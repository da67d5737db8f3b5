// A claimed job as the drain holds it, from its claim until its settlement has returned: one record
// with one state, changed only by the transitions below, each of which checks where it comes from.
//
//   claimed ──start()────────► running ──finish(outcome)──► settling ──settled(result)──► done
//      │                                                       ▲
//      ├──finish('released' | 'cancelled') (never started)──────┘
//      └──forget() (its lease was lost: another drainer runs it)─────────────────────────► done
//
//   claimed   its handler not started yet (the drain's queue, oldest first)
//   running   its handler runs
//   settling  its outcome is known: the settler has it (buffered, or in a statement on its way)
//   done      its settlement returned, or it was never ours to settle: off the books
//
// The book (JobBook) holds the live records and is the one place that hears of every transition:
// it keeps what the claim planner counts — jobs held per kind (claimed or running: this drainer's
// own `concurrency` counts them), jobs the database still counts as running per limited kind (every
// state but done) —, counts how each job ended, and tells the drain loop that something changed.
import type { ClaimedJob } from '../queries/index.ts';

export type JobState = 'claimed' | 'running' | 'settling' | 'done';

/** How the drain ends a job; the settlement statement says what it became. `snoozed`: settled by
 * its kind's runner's own statement (outcome.ts), already committed: pending again later, or
 * waiting, with no attempt spent. */
export type JobOutcome = 'completed' | 'failed' | 'released' | 'cancelled' | 'snoozed';

/** What a settlement statement made of the job: its outcome, a retry, dead, or lost (refused by
 * the lock token: the job was reaped and belongs to someone else now). */
export type SettledAs = 'completed' | 'failed' | 'dead' | 'released' | 'cancelled' | 'lost' | 'snoozed';

export interface SettledCounts {
  completed: number;
  /** Failed and scheduled for a retry. */
  failed: number;
  /** Failed for the last time (or permanently). */
  dead: number;
  released: number;
  /** Ended cancelled: someone asked to while they were held. */
  cancelled: number;
  /** Settlements refused by the lock token, and jobs whose lease was lost before they started. */
  lost: number;
  /** Settled by their handler's own statement: pending again later (or waiting), no attempt spent. */
  snoozed: number;
  /** Their settlement statement failed (the database refused it, or stayed out of reach past their
   * lease): still running in the database; the reaper hands them on once their leases end, and they
   * run again. */
  unsettled: number;
}

/** Counts of nothing settled: a report's start. */
export const noneSettled = (): SettledCounts => ({
  completed: 0,
  failed: 0,
  dead: 0,
  released: 0,
  cancelled: 0,
  lost: 0,
  snoozed: 0,
  unsettled: 0,
});

export class JobRecord {
  readonly job: ClaimedJob;
  /** When its claim was sent (its lock dates from then, at the latest). */
  readonly claimSentAt: number;
  /** What its kind's runner prepared for its attempt (KindRunner.prepare); undefined: nothing. */
  readonly prepared: unknown;
  #state: JobState = 'claimed';
  #outcome: JobOutcome | null = null;
  readonly #book: JobBook;

  constructor(book: JobBook, job: ClaimedJob, claimSentAt: number, prepared?: unknown) {
    this.#book = book;
    this.job = job;
    this.claimSentAt = claimSentAt;
    this.prepared = prepared;
  }

  get state(): JobState {
    return this.#state;
  }

  get kind(): string {
    return this.job.kind;
  }

  /** What its handler (or the drain) ended it as; null until finish(). */
  get outcome(): JobOutcome | null {
    return this.#outcome;
  }

  start(): void {
    this.#move(['claimed'], 'running');
  }

  /** Its end is known: to be settled as `outcome`. */
  finish(outcome: JobOutcome): void {
    this.#move(outcome === 'released' || outcome === 'cancelled' ? ['claimed', 'running'] : ['running'], 'settling');
    this.#outcome = outcome;
  }

  /** Its settlement statement returned (or failed: the job stays running for the reaper, and the
   * drain no longer holds it either way). */
  settled(as: SettledAs | null): void {
    this.#move(['settling'], 'done');
    this.#book.ended(this, as);
  }

  /** Its lease was lost before it started: someone else holds it now; nothing to settle. */
  forget(): void {
    this.#move(['claimed'], 'done');
    this.#book.ended(this, 'lost');
  }

  #move(from: readonly JobState[], to: JobState): void {
    if (!from.includes(this.#state)) throw new Error(`job ${this.job.id}: cannot go from ${this.#state} to ${to}`);
    const was = this.#state;
    this.#state = to;
    this.#book.moved(this, was, to);
  }
}

export interface JobBookOptions {
  /** A job of `kind` is done: the database no longer counts it as running (a limited kind's slot
   * may be free). */
  onDone?: (kind: string) => void;
  /** Any transition. */
  onChange?: () => void;
}

export class JobBook {
  readonly counts: SettledCounts = noneSettled();
  /** Claimed, not started, oldest first. */
  readonly #queued: JobRecord[] = [];
  #running = 0;
  #live = 0;
  /** Per kind: held (claimed or running), and live (not done). */
  readonly #held = new Map<string, number>();
  readonly #liveByKind = new Map<string, number>();
  readonly #options: JobBookOptions;

  constructor(options: JobBookOptions = {}) {
    this.#options = options;
  }

  /** Records for jobs a claim brought back, queued in claim order (with what their kinds' runners
   * prepared for each, by job id). */
  claimed(jobs: readonly ClaimedJob[], claimSentAt: number, prepared?: ReadonlyMap<string, unknown>): JobRecord[] {
    const records = jobs.map((job) => new JobRecord(this, job, claimSentAt, prepared?.get(job.id)));
    for (const r of records) {
      this.#queued.push(r);
      this.#add(this.#held, r.kind, 1);
      this.#add(this.#liveByKind, r.kind, 1);
      this.#live++;
    }
    if (records.length > 0) this.#options.onChange?.();
    return records;
  }

  /** The oldest queued record, taken out of the queue to start (null when none is queued). */
  nextQueued(): JobRecord | null {
    return this.#queued.shift() ?? null;
  }

  /** Every queued record, taken out of the queue (the drain is stopping: they are released). */
  takeQueued(): JobRecord[] {
    return this.#queued.splice(0);
  }

  get queued(): number {
    return this.#queued.length;
  }

  get running(): number {
    return this.#running;
  }

  /** Records not done. */
  get live(): number {
    return this.#live;
  }

  /** Jobs of `kind` claimed or running here. */
  held(kind: string): number {
    return this.#held.get(kind) ?? 0;
  }

  /** Jobs of `kind` the database counts as running because of this drain (not done yet). */
  unsettled(kind: string): number {
    return this.#liveByKind.get(kind) ?? 0;
  }

  /** JobRecord's transitions report here; nothing else changes the counts. */
  moved(record: JobRecord, from: JobState, to: JobState): void {
    if (from === 'claimed') {
      const at = this.#queued.indexOf(record);
      if (at >= 0) this.#queued.splice(at, 1);
    }
    if (to === 'running') this.#running++;
    if (from === 'running') this.#running--;
    if ((from === 'claimed' || from === 'running') && to !== 'running') this.#add(this.#held, record.kind, -1);
    if (to === 'done') {
      this.#live--;
      this.#add(this.#liveByKind, record.kind, -1);
      this.#options.onDone?.(record.kind);
    }
    this.#options.onChange?.();
  }

  /** A record is done, settled as `as` (null: its statement failed: unsettled). */
  ended(_record: JobRecord, as: SettledAs | null): void {
    this.counts[as ?? 'unsettled']++;
  }

  #add(counts: Map<string, number>, kind: string, delta: number): void {
    counts.set(kind, (counts.get(kind) ?? 0) + delta);
  }
}
