// One job's attempt — its handler, or its kind's own runner (KindRunner) — run with its timeout
// (the job's own up to its kind's maxTimeoutMs, else its kind's) clipped to the drain's deadline
// and an AbortSignal that fires at the timeout, when the job's lease is lost, when someone cancels
// it, or when a stopping drainer gives up on it. A handler that ignores its signal is abandoned then
// (its promise is no longer awaited), never waited for forever.
// It resolves to the attempt's one Outcome (outcome.ts), never rejects.
//
// What the handler returns is the job's result: serialized (at most MAX_RESULT_BYTES) only when its
// kind keeps its jobs. A transactional kind's handler runs inside a transaction on a connection of
// its own, and the job's completion is written, fenced by its lock token, in that same transaction:
//
//   BEGIN ─► handler(payload, ctx.tx) ─► complete (fenced) ─► COMMIT     the writes and the completion
//             │ throws                    │ lease lost or cancelled        commit together …
//             ▼                           ▼
//           ROLLBACK, the attempt fails  ROLLBACK, the job is lost / ends cancelled   … or neither does
//
// Given up mid-transaction (timeout, lost lease, cancel, shutdown), its connection is destroyed, so
// the server rolls back at once and nothing the handler does afterwards can reach the database.
import { MAX_PROGRESS_BYTES, MAX_RESULT_BYTES } from '../db/constants.ts';
import {
  type JobContext,
  type JobDefinition,
  type JobRegistry,
  PermanentJobError,
  describeIssues,
  handlerTimeoutMs,
} from '../jobs/registry.ts';
import type { AttemptRuntime, KindRunner } from '../jobs/definition.ts';
import type { OpenTransactionConnection } from '../db/connections.ts';
import { databaseErrorText } from '../db/errors.ts';
import { type ClaimedJob, type Db, completeJobs, getDependencies, snoozeRun, startedByOf } from '../queries/index.ts';
import { longerThan, toJson, utf8Length } from '../json.ts';
import type { ProcessSpan } from '../tracing.ts';
import type { Deadline, Deadlines } from './deadlines.ts';
import { JobCancelledError, LeaseLostError } from './lease-keeper.ts';
import { type Kept, type Outcome, outcomeOf } from './outcome.ts';

export { HandlerAbandonedError } from './outcome.ts';

/** Gives the job up: aborts its handler's signal and stops waiting for the handler. */
export type GiveUp = (error: Error) => void;

export interface HandlerEnvironment {
  /** The drain's database: ctx.dependencies() reads through it. */
  db: Db;
  /** Connections for transactional handlers; default: transactions on `db` (which cannot be cut
   * short when a handler is given up: the rollback waits for its statement in flight). */
  transactions?: OpenTransactionConnection;
  /** The handler reported progress (JSON text). */
  progress: (jobId: string, json: string) => void;
  /** Its last report not saved yet (a transactional completion saves it). */
  unsavedProgress: (jobId: string) => string | undefined;
  /** Saves its last report now, if it is not saved yet (before its handler settles the job itself). */
  saveProgress: (jobId: string) => Promise<void>;
  /** Its handler's statement that may settle it is on its way: no renewal until the returned call. */
  holdForSettling: (jobId: string) => () => void;
  /** A transactional completion adds itself to job_counts. */
  recordCounts: boolean;
  /** The drain's one timer for its handlers' deadlines. */
  deadlines: Deadlines;
  /** A handler given up (its timeout, the drain's budget, its lease) that may still be running: the
   * drain waits for it until its budget ends (unset: it does not wait). */
  outlived?: (handler: Promise<unknown>) => void;
}

/** Runs one attempt of `job` and resolves to its outcome (never rejects). */
export async function runAttempt(
  registry: JobRegistry,
  job: ClaimedJob,
  /** Epoch ms by which the handler must be done (the drain's budget). */
  deadline: number,
  environment: HandlerEnvironment,
  /** Receives the function that gives the job up (the lease keeper calls it when the lease is lost). */
  onStart: (giveUp: GiveUp) => void,
  /** Tracing: the handler runs with this `process` span active. */
  span?: ProcessSpan,
  /** What its kind's runner prepared for it (KindRunner.prepare). */
  prepared?: unknown,
): Promise<Outcome> {
  let attempt: Attempt | undefined;
  try {
    const definition = registry.get(job.kind, job.version);
    if (!definition && job.version !== null && registry.get(job.kind))
      // Its claim lists the versions this drainer has (claim.sql): only a race with a registry that
      // changed gets here. It goes back to pending for a drainer that has its version.
      return { as: 'released', reason: `version ${job.version} of ${job.kind} is not registered in this drainer` };
    if (!definition) throw new PermanentJobError(`no handler is registered for kind ${JSON.stringify(job.kind)}`);
    const payload = payloadOf(definition, job);
    attempt = new Attempt(job, definition, deadline, environment.deadlines);
    const given = attempt;
    onStart((error) => given.giveUp(error));
    if (definition.runner) return await runRunner(attempt, definition.runner, payload, environment, span, prepared);
    if (definition.transactional) return await runInTransaction(attempt, payload, environment, span);
    const value = await attempt.handler(
      callHandler(definition, payload, new HandlerContext(attempt, environment), span),
    );
    return { as: 'completed', kept: keptResult(definition, value) };
  } catch (error) {
    return outcomeOf(job, attempt?.givenUpWith ?? error);
  } finally {
    attempt?.end(environment.outlived);
  }
}

/** An attempt of a kind with a runner of its own (KindRunner). */
async function runRunner(
  attempt: Attempt,
  runner: KindRunner<unknown, unknown>,
  payload: unknown,
  environment: HandlerEnvironment,
  span: ProcessSpan | undefined,
  prepared: unknown,
): Promise<Outcome> {
  const ctx = new HandlerContext(attempt, environment);
  const runtime = attemptRuntime(attempt, environment, prepared);
  const call = async () => {
    await undefined;
    return span ? span.run(() => runner.attempt(payload, ctx, runtime)) : runner.attempt(payload, ctx, runtime);
  };
  const result = await attempt.handler(call());
  if ('snoozed' in result)
    return { as: 'snoozed', dueAt: result.snoozed.dueAt, readyKinds: result.snoozed.readyKinds ?? [] };
  return { as: 'completed', kept: keptResult(attempt.definition, result.completed) };
}

/** What a runner's attempt gets of the drain (AttemptRuntime). */
function attemptRuntime(attempt: Attempt, environment: HandlerEnvironment, prepared: unknown): AttemptRuntime {
  const jobId = attempt.job.id;
  // Held first, then the progress saved: a renewal the timer sends while the progress is on its
  // way leaves the job out, so none can reach the database after the runner's own statement.
  const beforeSettling = async () => {
    const release = environment.holdForSettling(jobId);
    try {
      await environment.saveProgress(jobId);
    } catch (error) {
      release();
      throw error;
    }
    return release;
  };
  return {
    db: environment.db,
    transactions: environment.transactions,
    attemptEndsAt: attempt.endsAt,
    attemptMs: attempt.allowedMs,
    prepared,
    saveProgress: () => environment.saveProgress(jobId),
    beforeSettling,
    snooze: async (until) => {
      const release = await beforeSettling();
      const notHeld = await snoozeRun(environment.db, { jobId, lockedBy: attempt.job.lockedBy }, until).finally(
        release,
      );
      if (notHeld === 'cancelled') throw new JobCancelledError(`job ${jobId} was cancelled while it ran`);
      if (notHeld) throw new LeaseLostError(`job ${jobId}: its lease was lost; it was not snoozed`);
      return { snoozed: { dueAt: until.getTime() } };
    },
  };
}

/** The handler called, a microtask later, inside its span if traced; a synchronous throw is its
 * promise's rejection. (A function, not a closure made per job: see Attempt.) */
async function callHandler(
  definition: JobDefinition<unknown>,
  payload: unknown,
  ctx: HandlerContext,
  span: ProcessSpan | undefined,
): Promise<unknown> {
  await undefined;
  return span ? span.run(() => definition.handler(payload, ctx)) : definition.handler(payload, ctx);
}

/**
 * One run of a handler: its deadline, its signal, and what it waits for, cut short when it is
 * given up. It is made for every job, so it costs what it must and no more: its deadline is an
 * entry in the drain's one timer (deadlines.ts), its AbortController is made when the handler first
 * reads ctx.signal (most never do), and it makes no named closures per job (a Worker's bundle wraps
 * each one to keep its name: a property definition per closure).
 */
class Attempt {
  #controller: AbortController | undefined;
  readonly #deadline: Deadline;
  /** Rejects what race() waits for now (unset once that has settled). */
  #reject: ((error: Error) => void) | undefined;
  /** The handler's own promise, once called: it goes on if the attempt is given up. */
  #handler: Promise<unknown> | undefined;
  /** Called once if the attempt is given up (a transaction's connection is destroyed). */
  onGiveUp: (() => void) | undefined;
  givenUpWith: Error | undefined;
  readonly job: ClaimedJob;
  readonly definition: JobDefinition<unknown>;
  /** The time it was given (its timeout, clipped to the drain's budget), and when that runs out. */
  readonly allowedMs: number;
  readonly endsAt: number;

  constructor(job: ClaimedJob, definition: JobDefinition<unknown>, deadline: number, deadlines: Deadlines) {
    this.job = job;
    this.definition = definition;
    const limit = timeLimit(handlerTimeoutMs(definition, job.timeoutMs), deadline, 'handler');
    this.allowedMs = limit.allowedMs;
    this.endsAt = Date.now() + limit.allowedMs;
    this.#deadline = deadlines.add(this.endsAt, () => this.giveUp(limit.error()));
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.givenUpWith) this.#controller.abort(this.givenUpWith);
    }
    return this.#controller.signal;
  }

  giveUp(error: Error): void {
    if (this.givenUpWith) return;
    this.givenUpWith = error;
    this.#controller?.abort(error);
    this.#reject?.(error);
    this.onGiveUp?.();
  }

  /** `work`, unless the attempt is given up first (or was already). One promise per call, and a
   * rejection nobody waits for cannot happen: giveUp() only rejects what is being waited for. */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.givenUpWith) {
      work.catch(() => {});
      return Promise.reject(this.givenUpWith);
    }
    return new Promise<T>((resolve, reject) => {
      this.#reject = reject;
      work.then(resolve, reject);
    });
  }

  /** race() over the handler's own promise, which end() hands to `outlived` if it was given up. */
  handler<T>(work: Promise<T>): Promise<T> {
    this.#handler = work;
    return this.race(work);
  }

  end(outlived?: (handler: Promise<unknown>) => void): void {
    this.#deadline.cancel();
    if (this.givenUpWith && this.#handler && outlived) outlived(this.#handler);
  }
}

/** The handler's `ctx`. */
class HandlerContext implements JobContext {
  readonly job: ClaimedJob;
  readonly #environment: HandlerEnvironment;
  readonly #attempt: Attempt;
  readonly #tx: Db | undefined;

  constructor(attempt: Attempt, environment: HandlerEnvironment, tx?: Db) {
    this.job = attempt.job;
    this.#attempt = attempt;
    this.#environment = environment;
    this.#tx = tx;
  }

  /** Aborted when the attempt is given up (made on first read). */
  get signal(): AbortSignal {
    return this.#attempt.signal;
  }

  progress(value: unknown): void {
    const json = toJson(value, 'ctx.progress()');
    if (json === null) throw new TypeError('ctx.progress() needs a JSON value, not undefined');
    if (longerThan(json, MAX_PROGRESS_BYTES)) {
      throw new RangeError(
        `ctx.progress() takes at most ${MAX_PROGRESS_BYTES} bytes of JSON; this value is ${utf8Length(json)}`,
      );
    }
    this.#environment.progress(this.job.id, json);
  }

  dependencies(): ReturnType<JobContext['dependencies']> {
    return getDependencies(this.#environment.db, this.job.id);
  }

  event(): ReturnType<JobContext['event']> {
    return startedByOf(this.#environment.db, this.job.id);
  }

  get tx(): Db {
    if (!this.#tx)
      throw new Error(
        `ctx.tx: kind ${this.job.kind} is not transactional; define it with transactional: true to get a transaction`,
      );
    return this.#tx;
  }
}

async function runInTransaction(
  attempt: Attempt,
  payload: unknown,
  environment: HandlerEnvironment,
  span?: ProcessSpan,
): Promise<Outcome> {
  const { job, definition } = attempt;
  const open = environment.transactions ?? (async () => ({ db: environment.db, giveBack: () => {} }));
  const opening = open();
  const connection = await attempt.race(opening).catch((error: unknown) => {
    opening.then(
      (late) => late.giveBack(true),
      () => {},
    ); // given up while connecting
    throw attempt.givenUpWith ?? error;
  });
  let over = false;
  attempt.onGiveUp = () => {
    over = true;
    connection.giveBack(true);
  };
  if (attempt.givenUpWith) attempt.onGiveUp();
  let kept: Kept | undefined;
  let unblocked: string[] = [];
  try {
    await connection.db.transaction(async (tx) => {
      const guarded = guardTransaction(tx as unknown as Db, () => over);
      const ctx = new HandlerContext(attempt, environment, guarded);
      const value = await attempt.handler(callHandler(definition, payload, ctx, span));
      kept = keptResult(definition, value);
      const {
        ended: [ended],
        unblockedKinds,
      } = await attempt.race(
        completeJobs(
          tx as unknown as Db,
          [{ id: job.id, lockedBy: job.lockedBy, ...kept, progressJson: environment.unsavedProgress(job.id) }],
          {
            recordCounts: environment.recordCounts,
          },
        ),
      );
      if (!ended)
        throw new LeaseLostError(`job ${job.id}: its lease was lost before its transaction committed; rolled back`);
      if (ended.status === 'cancelled')
        throw new JobCancelledError(`job ${job.id} was cancelled while it ran; its transaction was rolled back`);
      unblocked = unblockedKinds;
    });
  } catch (error) {
    // A rollback on a destroyed connection fails too: the reason it was given up is the one to report;
    // the server's, when it ended the connection (the next statement only says it is gone).
    throw attempt.givenUpWith ?? endedByServer(connection.endedWith?.()) ?? error;
  } finally {
    over = true;
    if (!attempt.givenUpWith) connection.giveBack(false);
  }
  return { as: 'completed', kept, inTransaction: { unblockedKinds: unblocked } };
}

/** The server ended a handler's transaction: said with the setting that did it, when one did. */
function endedByServer(cause: unknown): Error | undefined {
  if (!cause) return undefined;
  const code = (cause as { code?: unknown }).code;
  if (code === '25P03')
    return new Error(
      "the handler's transaction stayed idle between two statements longer than the database's " +
        `idle_in_transaction_session_timeout, which ended it: ${databaseErrorText(cause)}`,
    );
  return new Error(`the database ended the handler's transaction: ${databaseErrorText(cause)}`);
}

/** ctx.tx, refusing use once its transaction is over (a handler that ignored its signal). */
function guardTransaction(tx: Db, isOver: () => boolean): Db {
  return new Proxy(tx, {
    get(target, property, receiver) {
      if (isOver())
        throw new Error(
          "ctx.tx: this job's transaction is over (its handler was given up); nothing more can be written through it",
        );
      const value = Reflect.get(target, property, receiver) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** A job's payload as its kind's schema reads it; a payload the schema refuses fails the job for good. */
export function payloadOf<Payload>(definition: JobDefinition<Payload>, job: ClaimedJob): Payload {
  const parsed = definition.schema.safeParse(job.payload);
  if (!parsed.success)
    throw new PermanentJobError(`payload rejected by kind ${job.kind}: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** The time a handler call is given — its timeout, clipped to the drain's budget (`deadline`, ms
 * since the epoch) — and the TimeoutError it is given up with when that runs out. */
export function timeLimit(timeoutMs: number, deadline: number, what: 'handler' | 'batch handler') {
  const left = deadline - Date.now();
  const allowedMs = Math.max(0, Math.min(timeoutMs, left));
  return {
    allowedMs,
    error(): Error {
      const message =
        left < timeoutMs
          ? `${what} did not finish within the drain's remaining budget of ${allowedMs} ms`
          : `${what} timed out after ${allowedMs} ms`;
      return Object.assign(new Error(message), { name: 'TimeoutError' });
    },
  };
}

/** How a job that ended cancelled is kept: as long as a completed job of its kind, without a result. */
export function cancelledKept(definition: JobDefinition<unknown> | undefined): Kept | undefined {
  const keepSeconds = definition?.keepCompletedSeconds ?? 0;
  return keepSeconds > 0 ? { keepSeconds, resultJson: null } : undefined;
}

/** The result to keep, for kinds that keep their jobs; a result that cannot be kept fails the job. */
export function keptResult(definition: JobDefinition<unknown>, value: unknown): Kept | undefined {
  const keepSeconds = definition.keepCompletedSeconds ?? 0;
  if (keepSeconds === 0) return undefined;
  let resultJson: string | null;
  try {
    resultJson = toJson(value, "the handler's result");
  } catch (error) {
    throw new PermanentJobError((error as Error).message);
  }
  if (resultJson !== null && longerThan(resultJson, MAX_RESULT_BYTES)) {
    throw new PermanentJobError(
      `the handler's result is ${utf8Length(resultJson)} bytes of JSON; a kept result is at most ${MAX_RESULT_BYTES}`,
    );
  }
  return { keepSeconds, resultJson };
}
