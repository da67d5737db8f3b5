// The parks of one attempt: every sleep, wait and child the run reaches at once (Promise.all over
// them) is queued here and written together, once no step of the attempt is running, so that the
// run wakes at the first of them that is due and no park is lost to another that ended the attempt
// first.
//
//   add(park) ─► queued ─► the next turn of the event loop, with no step.run in flight:
//       one park   its own statement (pgdrain.park_sleep(), park_wait(), or the child's enqueue and
//                  park in one durable transaction): the common case, as cheap as it was
//       several    one transaction: the new children enqueued in one statement, then
//                  pgdrain.park_steps() records them all and ends the attempt once — unless some
//                  are done already: those resolve, and the rest are queued again (the run goes
//                  on with what is done, as Promise.race does, and parks on the rest when it has
//                  nothing done left to go on with)
//   each park's promise: resolves when it is done without parking (a sleep that has ended, a wait
//   an event answers, a child that has ended); rejects with RunParked when the attempt parked (the
//   run's code never sees it: index.ts's #parkable), or with why the job is not held.
import { PgdrainError } from '../errors.ts';
import { preparedJobs } from '../jobs/enqueue.ts';
import {
  type Db,
  type HeldRun,
  type NotHeld,
  type ParkOutcome,
  type StepPark,
  commitDurably,
  parkOnChild,
  parkSleep,
  parkSteps,
  waitForEvent,
} from '../queries/index.ts';
import type { NewJob } from '../queries/enqueue/types.ts';

export type DonePark = ParkOutcome & { outcome: 'done' };

/** The attempt parked: a fenced statement has ended it (the job pending again at `dueAt`, its attempt
 * refunded, or waiting for something). Thrown inside the workflow module only, to unwind the run's
 * code to runWorkflow, which resolves the attempt as snoozed (KindRunner). */
export class RunParked extends PgdrainError {
  override name = 'RunParked';
  readonly code = 'run_parked';
  /** When the job is due again (ms since the epoch); null: something else makes it due. */
  readonly dueAt: number | null;
  /** Kinds of jobs the statement made ready (children it enqueued): claimed at once. */
  readonly readyKinds: readonly string[];
  constructor(message: string, dueAt: number | null, readyKinds: readonly string[] = []) {
    super(message);
    this.dueAt = dueAt;
    this.readyKinds = readyKinds;
  }
}

interface Queued {
  park: StepPark;
  /** A new child to enqueue with the park (step.invoke's first call). */
  child: NewJob | undefined;
  resolve: (done: DonePark) => void;
  reject: (error: unknown) => void;
}

const nextTurn: (fn: () => void) => void =
  typeof setImmediate === 'function' ? (fn) => setImmediate(fn) : (fn) => setTimeout(fn, 0);

export class AttemptParks {
  readonly #db: Db;
  readonly #run: HeldRun;
  readonly #notHeld: (why: NotHeld) => Error;
  /** Before a park that may end the attempt: the run's unsaved progress saved, renewals held off. */
  readonly #beforeSettling: () => Promise<() => void>;
  #queued: Queued[] = [];
  #scheduled = false;
  #stepsRunning = 0;
  #closed = false;
  /** Kinds of the children this attempt enqueued: ready now, for the drain to claim. */
  readonly #born = new Set<string>();

  constructor(db: Db, run: HeldRun, notHeld: (why: NotHeld) => Error, beforeSettling: () => Promise<() => void>) {
    this.#db = db;
    this.#run = run;
    this.#notHeld = notHeld;
    this.#beforeSettling = beforeSettling;
  }

  add(park: StepPark, child?: NewJob): Promise<DonePark> {
    // The attempt is over (the run returned or threw): nothing more is written for it.
    if (this.#closed) return new Promise<DonePark>(() => {});
    return new Promise<DonePark>((resolve, reject) => {
      this.#queued.push({ park, child, resolve, reject });
      this.#schedule();
    });
  }

  /** A step.run of the attempt started, or ended: parks are written once none runs, so that a step
   * running beside them records its outcome before the attempt ends. */
  stepStarted(): void {
    this.#stepsRunning++;
  }

  stepEnded(): void {
    this.#stepsRunning--;
    this.#schedule();
  }

  /** The run returned or threw: what is queued is dropped (its promises never settle). */
  close(): void {
    this.#closed = true;
    this.#queued = [];
  }

  #schedule(): void {
    if (this.#scheduled || this.#queued.length === 0 || this.#stepsRunning > 0) return;
    this.#scheduled = true;
    nextTurn(() => {
      this.#scheduled = false;
      if (this.#closed || this.#stepsRunning > 0) return;
      const batch = this.#queued.splice(0);
      if (batch.length === 0) return;
      const written = this.#beforeSettling().then((release) =>
        (batch.length === 1 ? this.#writeOne(batch[0]!) : this.#writeMany(batch)).finally(release),
      );
      written.catch((error: unknown) => {
        for (const q of batch) q.reject(error);
      });
    });
  }

  async #writeOne(q: Queued): Promise<void> {
    const { park } = q;
    if (park.type === 'sleep')
      return this.#settle(q, await parkSleep(this.#db, park, park.until), `sleeping (step ${park.name})`);
    if (park.type === 'wait')
      return this.#settle(
        q,
        await waitForEvent(this.#db, park),
        `waiting for event ${park.event} (${park.key}) (step ${park.name})`,
      );
    const outcome = await this.#db.transaction(async (tx) => {
      if (q.child) {
        // An enqueue: durable, although the drain's own statements commit asynchronously.
        await commitDurably(tx);
        const [made] = await preparedJobs([q.child], null).send(tx);
        park.childId = made!.id;
        this.#born.add(q.child.kind);
      }
      const parked = await parkOnChild(tx, park, park.childId);
      // Not held: the child's enqueue rolls back with the transaction.
      if (parked.outcome === 'lost' || parked.outcome === 'cancelled') throw this.#notHeld(parked.outcome);
      return parked;
    });
    this.#settle(q, outcome, `waiting for job ${park.childId} (step ${park.name})`);
  }

  #settle(q: Queued, outcome: ParkOutcome, what: string): void {
    if (outcome.outcome === 'done') q.resolve(outcome);
    else if (outcome.outcome === 'parked')
      q.reject(new RunParked(what, outcome.wakeAt?.getTime() ?? null, [...this.#born]));
    else q.reject(this.#notHeld(outcome.outcome));
  }

  async #writeMany(batch: Queued[]): Promise<void> {
    const born = batch.filter((q) => q.child);
    const parks = batch.map((q) => q.park);
    const written = await this.#db.transaction(async (tx) => {
      if (born.length > 0) {
        await commitDurably(tx);
        const made = await preparedJobs(
          born.map((q) => q.child!),
          null,
        ).send(tx);
        born.forEach((q, i) => {
          (q.park as StepPark & { type: 'child' }).childId = made[i]!.id;
          this.#born.add(q.child!.kind);
        });
      }
      const outcome = await parkSteps(tx, this.#run, parks);
      if (outcome.outcome !== 'recorded') throw this.#notHeld(outcome.outcome);
      return outcome;
    });
    const done = batch.filter((q) => written.steps.get(q.park.name)?.outcome === 'done');
    if (done.length > 0) {
      // The attempt goes on: the rest, recorded already, are parked on at a later call.
      for (const q of done) q.resolve(written.steps.get(q.park.name) as DonePark);
      const rest = batch.filter((q) => !done.includes(q));
      for (const q of rest) q.child = undefined;
      this.#queued.push(...rest);
      this.#schedule();
      return;
    }
    let dueAt: number | null = null;
    for (const step of written.steps.values())
      if (step.outcome === 'parked' && step.wakeAt) dueAt = Math.min(dueAt ?? Infinity, step.wakeAt.getTime());
    const settled = new RunParked(`parked on steps ${parks.map((p) => p.name).join(', ')}`, dueAt, [...this.#born]);
    for (const q of batch) q.reject(settled);
  }
}
