// Durable workflows: a job kind whose `run(payload, step)` is re-entered from the top at every
// attempt. Each step the run reaches is a row in pgdrain.workflow_steps (queries/workflows.ts): a
// step whose row holds an outcome returns it without running; the first one without runs.
//
//   step.run(name, fn)                    runs fn once; its result (JSON) is stored when it returns
//   step.run(name, fn, { transactional })  fn gets `tx`; its writes and the step's record commit
//                                          together — exactly once inside PostgreSQL
//   step.sleep(name, seconds)             parks the run: `waiting`, no slot, lease or connection held
//   step.waitForEvent(name, { event, key, timeoutSeconds })
//                                         the event's payload (sendEvent), or null at the timeout;
//                                         parks the run until then
//   step.invoke(name, kind, payload)      enqueues a child job once, parks until it ends, returns
//                                         its result or fails with its error
//
// A workflow is a kind with a runner of its own (KindRunner, jobs/definition.ts): the drain calls
// runWorkflow for each attempt, after reading the stored steps of a claim's runs at once (prepare).
// A park ends the attempt without spending one: its statement snoozes the job (pending until a
// sleep's end or a wait's timeout, or waiting for an event or a child), and the attempt resolves as
// snoozed, the drain's generic outcome. The parked step's promise never settles, so code
// around it — a `try { await step.sleep(…) } catch {}` — cannot go on in an attempt that is over.
// A step that throws fails the attempt by the kind's retry rule; stored steps
// never run again. Names identify steps: a name used twice in one run is an error at the second
// call; a deploy that changes a workflow mid-run reuses the stored names, runs the new ones and
// ignores the removed ones.
import { z } from 'zod';
import type { OpenTransactionConnection } from '../db/connections.ts';
import { KIND_PATTERN, KIND_PATTERN_MESSAGE } from '../db/constants.ts';
import { JobCancelledError, LeaseLostError } from '../drain/lease-keeper.ts';
import { MAX_RESULT_BYTES } from '../db/constants.ts';
import { PgdrainError } from '../errors.ts';
import { errorText, longerThan, toJson, utf8Length } from '../json.ts';
import { writeStepRecord } from './step-records.ts';
import {
  type AttemptResult,
  type AttemptRuntime,
  type JobContext,
  type JobDefinition,
  defineJob,
} from '../jobs/definition.ts';
import { PermanentJobError } from '../jobs/registry.ts';
import { type EnqueueOptions, prepareJob } from '../jobs/enqueue.ts';
import {
  type ClaimedJob,
  type Db,
  type NotHeld,
  type StepRecord,
  type StepType,
  type StoredStep,
  type Backoff,
  type FailedTry,
  type StepPark,
  cancel,
  loadSteps,
  loadStepsOfAttempts,
  registerCancelTriggers,
  snoozeRun,
  recordStepCompleted,
  recordStepFailed,
  holdRun,
} from '../queries/index.ts';
import type { NewJob } from '../queries/enqueue/types.ts';
import { traceStep } from '../tracing.ts';
import { MAX_EVENT_KEY_LENGTH, MAX_EVENT_PAYLOAD_BYTES } from './events.ts';
import { AttemptParks, type DonePark, RunParked } from './parks.ts';

export {
  sendEvent,
  checkedEvent,
  EventValidationError,
  MAX_EVENT_PAYLOAD_BYTES,
  type WorkflowEvent,
} from './events.ts';

/** A run reaches at most this many steps. */
export const MAX_STEPS_PER_RUN = 1000;
/** A step's name is 1 to this many characters. */
export const MAX_STEP_NAME_LENGTH = 200;
/** The longest sleep or wait: a year. */
export const MAX_SLEEP_SECONDS = 365 * 86_400;

/** What a step's function gets. */
export interface StepContext {
  /** Aborted when the run's attempt is given up (timeout, lost lease, cancel, shutdown). */
  signal: AbortSignal;
  /** `{ transactional: true }` steps: the transaction the step's record commits in. */
  tx: Db;
  /** Runs of this step so far, this one included. */
  attempt: number;
}

export interface StepOptions {
  /** Run inside a transaction (`tx`) in which the step's record commits: its writes happen exactly
   * once. It holds a connection while it runs. */
  transactional?: boolean;
  /** Tries of this step (1 to 100), its own, beside the run's: a try that throws with tries left
   * snoozes the run for `backoff`, then the step runs again, and the run's attempts are not
   * spent. When they are spent, the step's error goes to the run (an error it does not catch fails
   * the attempt by the kind's retry rule). Default 1: the step's error goes to the run at once. */
  maxAttempts?: number;
  /** The wait between this step's tries: `baseSeconds` doubled at each try, with jitter, at most
   * `capSeconds`. Default 1 s, capped at 1 hour (a job's retry backoff). */
  backoff?: Backoff;
  /** Bounds each try of the step (its signal aborts then, and the try fails with StepTimeoutError).
   * The step starts only in an attempt with that much time left: otherwise the run snoozes and the
   * step starts a fresh attempt, so the kind's timeout counts only what runs between parks. */
  timeoutMs?: number;
}

/** How a run's code departs from its recorded history (WorkflowChangedError; a held run's `held`). */
export interface WorkflowChange {
  code: 'workflow_changed';
  /** The step where the code departs. */
  step: string;
  /** Its position in the run's history (where a new step would go, for a step the history lacks). */
  position: number;
  /** What the history recorded at that name (null: a name it does not have, or a record of wave 5). */
  recorded: StepType | null;
  /** What the code calls now. */
  called: StepType;
  /** The run's version. */
  version: number;
  message: string;
}

/** A run's code no longer matches its recorded history: the attempt ran nothing and the run is
 * held (status `waiting`, `held` says why) until a deploy that fits it, a retry or a cancel. */
export class WorkflowChangedError extends PgdrainError {
  override name = 'WorkflowChangedError';
  readonly code = 'workflow_changed';
  readonly change: WorkflowChange;
  constructor(change: WorkflowChange) {
    super(change.message);
    this.change = change;
  }
}

/** step.patched(id) is recorded as a step of this name. */
const PATCH_PREFIX = 'patched:';

/** What #begin gives a step: its record, or how the call departs from the history. */
type Begun = { stored: StoredStep | undefined; record: StepRecord } | { changed: WorkflowChange };

/** The same step, as far as a replay goes: a sleep and a sleepUntil park alike. */
const sameStepType = (a: StepType, b: StepType): boolean =>
  a === b || ((a === 'sleep' || a === 'sleepUntil') && (b === 'sleep' || b === 'sleepUntil'));

const TYPE_WORDS: Record<StepType, string> = {
  run: 'step.run()',
  sleep: 'step.sleep()',
  sleepUntil: 'step.sleepUntil()',
  waitForEvent: 'step.waitForEvent()',
  invoke: 'step.invoke()',
  patched: 'step.patched()',
};
const describeType = (type: StepType): string => TYPE_WORDS[type] ?? type;

/** A step's try ran past its `timeoutMs`. */
export class StepTimeoutError extends PgdrainError {
  override name = 'StepTimeoutError';
  readonly code = 'step_timeout';
}

/** The most tries a step may have. */
export const MAX_STEP_ATTEMPTS = 100;
/** An attempt younger than this is fresh: a step with a timeoutMs runs in it whatever time is left. */
const FRESH_ATTEMPT_MS = 1_000;

export interface WaitForEventOptions {
  event: string;
  key: string;
  /** Give up after this many seconds: the wait returns null. Default: wait as long as it takes. */
  timeoutSeconds?: number;
  /** A JSON object the event's payload must contain (`jsonb @>`: `{ status: 'paid' }` matches
   * `{ status: 'paid', total: 5 }`); an event that does not match neither answers nor wakes the wait. */
  match?: Record<string, unknown>;
}

export interface WorkflowStep {
  run<T>(name: string, fn: (ctx: StepContext) => T | Promise<T>, options?: StepOptions): Promise<T>;
  /** A small change without a new version: true for a run that reaches this point fresh, false for
   * a run whose recorded history already went past it (it took the old path). Recorded: every later
   * replay of the run gets the same answer. Ids are yours, one per change; keep them once shipped. */
  patched(id: string): Promise<boolean>;
  sleep(name: string, seconds: number): Promise<void>;
  /** Parks the run until `until` (a moment up to a year ahead; one past completes the step at once). */
  sleepUntil(name: string, until: Date): Promise<void>;
  waitForEvent<T = unknown>(name: string, options: WaitForEventOptions): Promise<T | null>;
  invoke<P, R = unknown>(name: string, job: JobDefinition<P>, payload: P, options?: EnqueueOptions): Promise<R>;
}

export interface WorkflowDefinition<Payload, Result> extends Omit<JobDefinition<Payload>, 'handler' | 'transactional'> {
  /** Re-entered from the top at every attempt: keep what happens outside steps deterministic and
   * side-effect free. What it returns is the job's result (kept with keepCompletedSeconds). */
  run: (payload: Payload, step: WorkflowStep, ctx: JobContext) => Result | Promise<Result>;
  /** Events that cancel a run (docs/events.md): an event of this name whose key is the one `key`
   * gives for the run's payload cancels the run, with its children, as POST /jobs/:id/cancel does —
   * also one sent after the run was enqueued but before it started. */
  cancelOn?: readonly CancelOn<Payload>[];
}

export interface CancelOn<Payload> {
  event: string;
  /** The key of the events that cancel this run (1 to 500 characters), from its payload. */
  key: (payload: Payload) => string;
}

export type Workflow<Payload, Result> = JobDefinition<Payload> & {
  readonly workflow: true;
  readonly run: WorkflowDefinition<Payload, Result>['run'];
};

/** A durable workflow: a job kind (register it, enqueue it, limit it like any other) whose run is made of steps. */
export function defineWorkflow<Payload, Result = unknown>(
  definition: WorkflowDefinition<Payload, Result>,
): Workflow<Payload, Result> {
  const { run, cancelOn = [], ...rest } = definition;
  if (typeof run !== 'function') throw new Error(`workflow ${definition.kind}: run must be a function`);
  for (const trigger of cancelOn) {
    if (typeof trigger?.event !== 'string' || !KIND_PATTERN.test(trigger.event) || typeof trigger.key !== 'function')
      throw new Error(
        `workflow ${definition.kind}: cancelOn takes { event, key: (payload) => string } ` +
          `(event: ${KIND_PATTERN_MESSAGE})`,
      );
  }
  const job = defineJob<Payload>({
    ...rest,
    handler: () => {
      throw new Error(`workflow ${definition.kind}: its runs are run by pgdrain's drain (or pgdrain/testing)`);
    },
    runner: {
      prepare: readStepsAhead,
      attempt: (payload, ctx, runtime) => runWorkflow(definition.kind, run, payload, ctx, runtime, cancelOn),
    },
  });
  return Object.assign(job, { workflow: true as const, run });
}

/** Whether a kind is a workflow. */
export const isWorkflow = (definition: JobDefinition<any> | undefined): boolean =>
  (definition as { workflow?: unknown } | undefined)?.workflow === true;

/** The stored steps of the runs a claim returned, read for all of them at once before they start
 * (KindRunner.prepare); a run read by neither (the read failed) reads its own. */
async function readStepsAhead(db: Db, runs: readonly ClaimedJob[]): Promise<ReadonlyMap<string, StoredStep[]>> {
  const steps = await loadStepsOfAttempts(
    db,
    runs.map((job) => ({ jobId: job.id, lockedBy: job.lockedBy })),
  );
  return new Map(runs.map((job) => [job.id, steps.get(job.id) ?? []]));
}

/** One attempt of a run: completed with what `run` returns, or snoozed where a step parked it. */
async function runWorkflow<Payload, Result>(
  kind: string,
  run: WorkflowDefinition<Payload, Result>['run'],
  payload: Payload,
  ctx: JobContext,
  runtime: AttemptRuntime<StoredStep[]>,
  cancelOn: readonly CancelOn<Payload>[],
): Promise<AttemptResult> {
  if (cancelOn.length > 0) await listForCancel(kind, runtime.db, ctx, payload, cancelOn);
  const held = { jobId: ctx.job.id, lockedBy: ctx.job.lockedBy };
  const steps = new Steps(kind, ctx, runtime, runtime.prepared ?? (await loadSteps(runtime.db, ctx.job.id, held)));
  // A park ends the attempt here, whatever the run's code does with the parked step (it never settles).
  try {
    const completed = await Promise.race([Promise.resolve().then(() => run(payload, steps, ctx)), steps.parked]);
    return { completed };
  } catch (error) {
    if (error instanceof RunParked) return { snoozed: { dueAt: error.dueAt, readyKinds: error.readyKinds } };
    if (error instanceof WorkflowChangedError) return holdDivergedRun(ctx, runtime, error.change);
    throw error;
  } finally {
    steps.close();
  }
}

/** A replay reached the first step that would do something (check.ts): the history fits so far. */
class ReplayReached extends PgdrainError {
  readonly code = 'replay_reached';
  readonly step: string;
  constructor(step: string) {
    super(`the replay reached step '${step}'`);
    this.step = step;
  }
}

/** How a run's recorded history meets `definition`'s code, with nothing run, parked or written
 * (check.ts): `fits` (the replay reached a step that would do something, or the run's end), or the
 * change that would hold it, or what the code threw before either. */
export async function replayAgainstHistory<Payload>(
  definition: JobDefinition<Payload>,
  payload: Payload,
  job: ClaimedJob,
  stored: readonly StoredStep[],
  db: Db,
): Promise<{ fits: true } | { changed: WorkflowChange } | { threw: unknown }> {
  const run = (definition as Partial<Workflow<Payload, unknown>>).run;
  if (!run) throw new TypeError(`kind ${definition.kind} is not a workflow`);
  const signal = new AbortController().signal;
  const ctx = {
    job,
    signal,
    progress: () => {},
    dependencies: async () => [],
    event: async () => null,
    get tx(): Db {
      throw new Error('a workflow has no ctx.tx');
    },
  } satisfies JobContext;
  const runtime: AttemptRuntime<StoredStep[]> = {
    db,
    attemptEndsAt: Number.POSITIVE_INFINITY,
    attemptMs: Number.POSITIVE_INFINITY,
    saveProgress: async () => {},
    beforeSettling: async () => () => {},
    snooze: () => Promise.reject(new Error('a replay does not snooze')),
    prepared: undefined,
  };
  const steps = new Steps(definition.kind, ctx, runtime, stored, { replayOnly: true });
  try {
    await Promise.race([Promise.resolve().then(() => run(payload, steps, ctx)), steps.parked]);
    return { fits: true };
  } catch (error) {
    if (error instanceof ReplayReached) return { fits: true };
    if (error instanceof WorkflowChangedError) return { changed: error.change };
    return { threw: error };
  } finally {
    steps.close();
  }
}

/** The run's code departs from its history: the attempt ends holding the run (pgdrain.hold_run()). */
async function holdDivergedRun(
  ctx: JobContext,
  runtime: AttemptRuntime<StoredStep[]>,
  change: WorkflowChange,
): Promise<AttemptResult> {
  const release = await runtime.beforeSettling();
  const notHeld = await holdRun(runtime.db, { jobId: ctx.job.id, lockedBy: ctx.job.lockedBy }, change).finally(release);
  if (notHeld === 'cancelled') throw new JobCancelledError(`job ${ctx.job.id} was cancelled while it ran`);
  if (notHeld) throw new LeaseLostError(`job ${ctx.job.id}: its lease was lost; it was not held`);
  return { snoozed: { dueAt: null } };
}

/** The run listed for cancellation by its cancelOn events; one already sent cancels it now. */
async function listForCancel<Payload>(
  kind: string,
  db: Db,
  ctx: JobContext,
  payload: Payload,
  cancelOn: readonly CancelOn<Payload>[],
): Promise<void> {
  const triggers = cancelOn.map(({ event, key }) => {
    const value = key(payload);
    if (typeof value !== 'string' || value.length < 1 || value.length > MAX_EVENT_KEY_LENGTH)
      throw new PermanentJobError(
        `workflow ${kind}: cancelOn ${event}: key must give 1 to ${MAX_EVENT_KEY_LENGTH} characters, ` +
          `not ${JSON.stringify(value)}`,
      );
    return { event, key: value };
  });
  if (await registerCancelTriggers(db, ctx.job.id, triggers)) {
    await cancel(db, ctx.job.id);
    throw new JobCancelledError(`job ${ctx.job.id} was cancelled by an event (cancelOn) sent before it started`);
  }
}

/** A wait's match as JSON text (null: none): a plain object of JSON, at most an event payload's size. */
function matchText(name: string, match: unknown): string | null {
  if (match === undefined) return null;
  if (match === null || typeof match !== 'object' || Array.isArray(match)) {
    throw new TypeError(`step.waitForEvent('${name}'): match must be an object the event's payload contains`);
  }
  const json = toJson(match, `step.waitForEvent('${name}')'s match`)!;
  if (longerThan(json, MAX_EVENT_PAYLOAD_BYTES)) {
    throw new RangeError(
      `step.waitForEvent('${name}'): match is ${utf8Length(json)} bytes of JSON; at most ${MAX_EVENT_PAYLOAD_BYTES}`,
    );
  }
  return json;
}

const stepName = z.string().min(1).max(MAX_STEP_NAME_LENGTH);
const seconds = z.number().finite().min(0).max(MAX_SLEEP_SECONDS);

class Steps implements WorkflowStep {
  readonly #kind: string;
  readonly #ctx: JobContext;
  readonly #db: Db;
  readonly #transactions: OpenTransactionConnection | undefined;
  readonly #stored: Map<string, StoredStep>;
  readonly #used = new Set<string>();
  #nextPosition: number;
  /** Rejects with the park that ended this attempt (runWorkflow races the run against it). */
  readonly parked: Promise<never>;
  #endAttempt: (ended: RunParked | WorkflowChangedError | ReplayReached) => void = () => {};
  /** The step whose park ended this attempt; no step begins after it. */
  #parkedAt: string | null = null;
  readonly #parks: AttemptParks;
  readonly #runtime: AttemptRuntime<StoredStep[]>;
  /** When this attempt's run began (a step's timeoutMs asks whether a fresh attempt has more room). */
  readonly #startedAt = Date.now();

  /** A pre-deploy check's replay (check.ts): recorded steps return their records, and the first step
   * that would run, park or write ends the replay there (ReplayReached), having done nothing. */
  readonly #replayOnly: boolean;

  constructor(
    kind: string,
    ctx: JobContext,
    runtime: AttemptRuntime<StoredStep[]>,
    stored: readonly StoredStep[],
    { replayOnly = false }: { replayOnly?: boolean } = {},
  ) {
    this.#replayOnly = replayOnly;
    this.#kind = kind;
    this.#ctx = ctx;
    this.#db = runtime.db;
    this.#transactions = runtime.transactions;
    this.#runtime = runtime;
    this.parked = new Promise<never>((_, reject) => {
      this.#endAttempt = reject;
    });
    this.#parks = new AttemptParks(
      this.#db,
      { jobId: ctx.job.id, lockedBy: ctx.job.lockedBy },
      (why) => this.#notHeldError(why),
      runtime.beforeSettling,
    );
    this.#stored = new Map(stored.map((s) => [s.name, s]));
    this.#nextPosition = stored.reduce((max, s) => Math.max(max, s.position + 1), 0);
  }

  async run<T>(name: string, fn: (ctx: StepContext) => T | Promise<T>, options: StepOptions = {}): Promise<T> {
    const begun = this.#begin(name, 'run');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    if (typeof fn !== 'function') throw new TypeError(`workflow ${this.#kind}: step.run('${name}') needs a function`);
    checkStepOptions(name, options);
    if (stored?.status === 'completed') return stored.result as T;
    if (this.#replayOnly) return this.#reached(name);
    // Parks of this attempt wait for it to end (parks.ts).
    this.#parks.stepStarted();
    try {
      return await this.#parkable(
        name,
        this.#traced(name, () => this.#runStep(name, fn, options, record)),
      );
    } finally {
      this.#parks.stepEnded();
    }
  }

  /** The run returned or threw: parks it left queued are not written. */
  close(): void {
    this.#parks.close();
  }

  async #runStep<T>(
    name: string,
    fn: (ctx: StepContext) => T | Promise<T>,
    options: StepOptions,
    record: StepRecord,
  ): Promise<T> {
    const attempt = record.priorAttempts + 1;
    // Not time enough left in this attempt for the step's own bound, after steps before it took
    // some: the step starts a fresh attempt, which has room for it (a fresh attempt never snoozes).
    const { attemptEndsAt, attemptMs } = this.#runtime;
    if (
      options.timeoutMs !== undefined &&
      attemptEndsAt - Date.now() < options.timeoutMs &&
      attemptMs >= options.timeoutMs &&
      Date.now() - this.#startedAt >= FRESH_ATTEMPT_MS
    )
      await this.#snooze(new Date(), `step ${name} needs ${options.timeoutMs} ms; it starts a fresh attempt`);
    const tried = new StepTry(this.#ctx.signal, name, options.timeoutMs);
    try {
      if (options.transactional) return await this.#runInTransaction(name, fn, record, attempt, tried);
      const value = await tried.race(
        Promise.resolve().then(() =>
          fn({
            signal: tried.signal,
            attempt,
            get tx(): Db {
              throw new Error(`step ${name}: tx is given to { transactional: true } steps only`);
            },
          }),
        ),
      );
      const json = this.#resultJson(name, value);
      this.#written(await writeStepRecord(this.#db, record, json));
      return (json === null ? undefined : JSON.parse(json)) as T;
    } catch (error) {
      // Tries left: the run snoozes for the backoff and the step runs again, no run attempt spent.
      if (this.#retriable(error) && attempt < (options.maxAttempts ?? 1)) {
        const until = new Date(Date.now() + backoffMs(options.backoff, attempt));
        await this.#snooze(until, `step ${name} failed (try ${attempt}); it runs again at ${until.toISOString()}`, {
          step: record,
          attempts: attempt,
          error: errorText(error),
        });
      }
      await this.#failed(record, error);
      throw error;
    } finally {
      tried.end();
    }
  }

  /** Whether a step's error may be retried by the step's own tries. */
  #retriable(error: unknown): boolean {
    return !(
      error instanceof RunParked ||
      error instanceof LeaseLostError ||
      error instanceof JobCancelledError ||
      error instanceof PermanentJobError ||
      this.#ctx.signal.aborted
    );
  }

  /** Ends the attempt with a snooze until `until` (and a step's failed try with it): throws the park. */
  async #snooze(until: Date, what: string, failed?: FailedTry): Promise<never> {
    const release = await this.#runtime.beforeSettling();
    const notHeld = await snoozeRun(
      this.#db,
      { jobId: this.#ctx.job.id, lockedBy: this.#ctx.job.lockedBy },
      until,
      failed,
    ).finally(release);
    if (notHeld) throw this.#notHeldError(notHeld);
    throw new RunParked(what, until.getTime());
  }

  async sleep(name: string, forSeconds: number): Promise<void> {
    const begun = this.#begin(name, 'sleep');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    if (!seconds.safeParse(forSeconds).success)
      throw new RangeError(`step.sleep('${name}'): seconds must be a number from 0 to ${MAX_SLEEP_SECONDS}`);
    if (stored?.status === 'completed') return this.#passedSleep(name, stored);
    if (this.#replayOnly) return this.#reached(name);
    // Its end is kept from the first park: a run re-entered later does not move it.
    await this.#park({ ...record, type: 'sleep', until: new Date(Date.now() + forSeconds * 1000) });
  }

  async sleepUntil(name: string, until: Date): Promise<void> {
    const begun = this.#begin(name, 'sleepUntil');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    if (!(until instanceof Date) || Number.isNaN(until.getTime())) {
      throw new TypeError(`step.sleepUntil('${name}'): until must be a valid Date`);
    }
    if (until.getTime() - Date.now() > MAX_SLEEP_SECONDS * 1000) {
      throw new RangeError(`step.sleepUntil('${name}'): until is more than a year ahead`);
    }
    if (stored?.status === 'completed') return this.#passedSleep(name, stored);
    if (this.#replayOnly) return this.#reached(name);
    await this.#park({ ...record, type: 'sleep', until });
  }

  /** A completed sleep. One whose end this attempt's read found (and completed) ends in this
   * attempt, as its span says. */
  async #passedSleep(name: string, stored: StoredStep): Promise<void> {
    if (stored.endedInRead) await this.#traced(name, async () => {});
  }

  async waitForEvent<T = unknown>(name: string, options: WaitForEventOptions): Promise<T | null> {
    const begun = this.#begin(name, 'waitForEvent');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    const { event, key, timeoutSeconds, match } = options ?? ({} as WaitForEventOptions);
    if (typeof event !== 'string' || !KIND_PATTERN.test(event))
      throw new TypeError(`step.waitForEvent('${name}'): event: ${KIND_PATTERN_MESSAGE}`);
    if (typeof key !== 'string' || key.length < 1 || key.length > MAX_EVENT_KEY_LENGTH) {
      throw new TypeError(`step.waitForEvent('${name}'): key must be 1 to ${MAX_EVENT_KEY_LENGTH} characters`);
    }
    if (timeoutSeconds !== undefined && !seconds.safeParse(timeoutSeconds).success) {
      throw new RangeError(
        `step.waitForEvent('${name}'): timeoutSeconds must be a number from 0 to ${MAX_SLEEP_SECONDS}`,
      );
    }
    const matchJson = matchText(name, match);
    // A recorded wait for another event or key: the run waits (or waited) where this code does not look.
    if (stored?.event != null && (stored.event !== event || stored.eventKey !== key))
      return this.#recordedOtherwise(
        name,
        stored,
        'waitForEvent',
        `step '${name}' (position ${stored.position}) recorded a wait for event '${stored.event}' with key ` +
          `'${stored.eventKey}', and the code now waits for event '${event}' with key '${key}'`,
      );
    if (stored?.status === 'completed') return (stored.result ?? null) as T | null;
    if (this.#replayOnly) return this.#reached(name);
    const until = timeoutSeconds === undefined ? null : new Date(Date.now() + timeoutSeconds * 1000);
    const outcome = await this.#park({ ...record, type: 'wait', event, key, until, matchJson });
    return (outcome.result ?? null) as T | null;
  }

  async patched(id: string): Promise<boolean> {
    const name = `${PATCH_PREFIX}${id}`;
    const begun = this.#begin(name, 'patched');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    if (stored?.status === 'completed') return stored.result === true;
    // Fresh unless the run's history already went past this point: steps it recorded remain ahead.
    const fresh = this.#unreached().length === 0;
    if (!this.#replayOnly) this.#written(await writeStepRecord(this.#db, record, JSON.stringify(fresh)));
    return fresh;
  }

  async invoke<P, R = unknown>(
    name: string,
    job: JobDefinition<P>,
    payload: P,
    options: EnqueueOptions = {},
  ): Promise<R> {
    const begun = this.#begin(name, 'invoke');
    if ('changed' in begun) return this.#diverged(name, begun.changed);
    const { stored, record } = begun;
    // A recorded child of another kind: the step's result would be another kind's.
    if (stored?.child && job && stored.child.kind !== job.kind)
      return this.#recordedOtherwise(
        name,
        stored,
        'invoke',
        `step '${name}' (position ${stored.position}) invoked a job of kind ${stored.child.kind}, and the code ` +
          `now invokes kind ${job.kind}`,
      );
    if (stored?.status === 'completed') return stored.result as R;
    if (this.#replayOnly) return this.#reached(name);
    if (stored?.childId) return this.#childEnded<R>(name, stored, record);
    if (!job?.keepCompletedSeconds) {
      throw new Error(
        `step.invoke('${name}'): kind ${job?.kind} keeps no results; give it keepCompletedSeconds so the workflow ` +
          `can read what its child returned`,
      );
    }
    // The enqueue pipeline's checks (payload, options) throw here, before anything is written.
    const child = prepareJob(job, { ...options, payload });
    await this.#park({ ...record, type: 'child', childId: '' }, child);
    // The child had ended already (a dedupe key matched a finished job): read how.
    return this.#childEnded<R>(name, await this.#reload(name), record);
  }

  /** A step's child has ended (or is still on its way: park again until it ends). */
  async #childEnded<R>(name: string, stored: StoredStep, record: StepRecord): Promise<R> {
    const child = stored.child;
    if (child?.status === 'completed') {
      const json = child.result === undefined ? null : JSON.stringify(child.result);
      return this.#traced(name, async () => {
        this.#written(await writeStepRecord(this.#db, record, json));
        return child.result as R;
      });
    }
    if (child && ['pending', 'running', 'waiting'].includes(child.status)) {
      await this.#park({ ...record, type: 'child', childId: stored.childId! });
      return this.#childEnded<R>(name, await this.#reload(name), record);
    }
    const error = new Error(
      child
        ? `step ${name}: job ${stored.childId} it invoked ` +
            `ended ${child.status}${child.lastError ? `: ${child.lastError}` : ''}`
        : `step ${name}: job ${stored.childId} it invoked is gone (deleted, or its keep ran out)`,
    );
    await this.#failed(record, error);
    throw error;
  }

  /** The step as stored now (after a park that found its child ended). */
  async #reload(name: string): Promise<StoredStep> {
    return (await loadSteps(this.#db, this.#ctx.job.id)).find((s) => s.name === name)!;
  }

  /**
   * A park (a sleep, a wait, a child), queued with the others this attempt makes at once and
   * written with them once no step of the attempt is running (parks.ts). Resolves when it is done
   * without parking (a sleep that has ended, a wait answered, a child that has ended); when the
   * attempt parks, it never settles (#parkable), and runWorkflow hears the park.
   */
  #park(park: StepPark, child?: NewJob): Promise<DonePark> {
    return this.#parkable(
      park.name,
      this.#traced(park.name, () => this.#parks.add(park, child)),
    );
  }

  /** A step that runs in this attempt, as a `step <name>` span under the run's (tracing.ts). */
  #traced<T>(name: string, fn: () => Promise<T>): Promise<T> {
    return traceStep({ kind: this.#kind, jobId: this.#ctx.job.id }, name, fn, (error) =>
      error instanceof RunParked ? 'parked' : 'failed',
    );
  }

  /** A step that may park: its park ends the attempt (runWorkflow hears it), and the promise the
   * run's code holds never settles, so nothing the code catches goes on in an attempt that is over. */
  async #parkable<T>(name: string, step: Promise<T>): Promise<T> {
    try {
      return await step;
    } catch (error) {
      if (!(error instanceof RunParked)) throw error;
      this.#parkedAt ??= name;
      this.#endAttempt(error);
      return new Promise<T>(() => {});
    }
  }

  async #runInTransaction<T>(
    name: string,
    fn: (ctx: StepContext) => T | Promise<T>,
    record: StepRecord,
    attempt: number,
    tried: StepTry,
  ): Promise<T> {
    const connection = this.#transactions ? await this.#transactions() : { db: this.#db, giveBack: () => {} };
    let broken = false;
    try {
      let json: string | null = null;
      // Given up (its timeout, the run's): the transaction's connection is destroyed below, which
      // rolls it back at once, whatever the step still does.
      const transaction = connection.db.transaction(async (tx) => {
        const value = await fn({ signal: tried.signal, attempt, tx: tx as unknown as Db });
        json = this.#resultJson(name, value);
        this.#written(await recordStepCompleted(tx as unknown as Db, record, json, { transactional: true }));
      });
      await tried.race(transaction);
      return (json === null ? undefined : JSON.parse(json)) as T;
    } catch (error) {
      broken = tried.signal.aborted;
      throw error;
    } finally {
      connection.giveBack(broken);
    }
  }

  /**
   * Checks a step's name and the run's bounds, and the call against the run's recorded history; what
   * is stored of it and its record to write, or how the code no longer matches the history. A run
   * has diverged when the code calls a recorded name as another type of step, or a name the history
   * does not have while recorded steps it has not reached remain (a step renamed, inserted before
   * others, or moved); step.patched() is the one call a history may lack anywhere.
   */
  #begin(name: string, what: StepType): Begun {
    if (!stepName.safeParse(name).success)
      throw new TypeError(
        `workflow ${this.#kind}: step.${what}() needs a name of 1 to ${MAX_STEP_NAME_LENGTH} characters`,
      );
    if (this.#used.has(name)) {
      throw new PermanentJobError(
        `workflow ${this.#kind}: step name '${name}' is used twice in one run; every step needs its own name (in a ` +
          `loop, add the index)`,
      );
    }
    if (this.#used.size >= MAX_STEPS_PER_RUN)
      throw new PermanentJobError(
        `workflow ${this.#kind}: a run has at most ${MAX_STEPS_PER_RUN} steps; step '${name}' is one more`,
      );
    if (this.#ctx.signal.aborted) throw this.#ctx.signal.reason;
    if (this.#parkedAt !== null) {
      // A replay ended at a step beside this one (Promise.all): this one is as far as it goes too.
      if (this.#replayOnly) throw new ReplayReached(name);
      throw new Error(
        `workflow ${this.#kind}: step '${name}' began after step '${this.#parkedAt}' parked the run; this attempt ` +
          `is over`,
      );
    }
    const stored = this.#stored.get(name);
    const changed = this.#divergence(name, what, stored);
    this.#used.add(name);
    if (changed) return { changed };
    const record: StepRecord = {
      jobId: this.#ctx.job.id,
      lockedBy: this.#ctx.job.lockedBy,
      name,
      position: stored?.position ?? this.#nextPosition++,
      stepType: what,
      startedAt: new Date(),
      priorAttempts: stored?.status === 'failed' ? stored.attempts : 0,
    };
    return { stored, record };
  }

  /** How calling `name` as `what` departs from the recorded history, if it does. */
  #divergence(name: string, what: StepType, stored: StoredStep | undefined): WorkflowChange | null {
    if (stored) {
      if (stored.type === null || sameStepType(stored.type, what)) return null;
      return this.#change(
        name,
        stored.position,
        stored.type,
        what,
        `step '${name}' (position ${stored.position}) is recorded as ${describeType(stored.type)}, and the code ` +
          `now calls it as ${describeType(what)}`,
      );
    }
    if (what === 'patched') return null;
    const ahead = this.#unreached();
    if (ahead.length === 0) return null;
    const listed = ahead
      .slice(0, 3)
      .map((s) => `'${s.name}' (${s.type ? describeType(s.type) : 'a step'}, position ${s.position})`)
      .join(', ');
    return this.#change(
      name,
      this.#nextPosition,
      null,
      what,
      `the code calls ${describeType(what)} '${name}', which the run's history does not have, before recorded ` +
        `steps it has not reached: ${listed}${ahead.length > 3 ? ` and ${ahead.length - 3} more` : ''}`,
    );
  }

  /** A divergence, with the run's kind and version named. */
  #change(step: string, position: number, recorded: StepType | null, called: StepType, why: string): WorkflowChange {
    const version = this.#ctx.job.version ?? 1;
    return {
      code: 'workflow_changed',
      step,
      position,
      recorded,
      called,
      version,
      message:
        `workflow ${this.#kind} (version ${version}) changed under run ${this.#ctx.job.id}: ${why}. The run is held: ` +
        `nothing ran; deploy code that fits its history (a version of its own, or step.patched()), or retry it ` +
        `from a step, or cancel it`,
    };
  }

  /** Recorded steps this attempt has not called (yet); step.patched()'s records are not steps. */
  #unreached(): StoredStep[] {
    return [...this.#stored.values()]
      .filter((s) => !this.#used.has(s.name) && s.type !== 'patched')
      .sort((a, b) => a.position - b.position);
  }

  /** A replay (replayOnly) reached a step that would do something: it ends there. */
  #reached<T>(name: string): Promise<T> {
    return this.#endsAt(name, new ReplayReached(name));
  }

  /** The run diverged at a step: the attempt ends there, holding the run (runWorkflow). */
  #diverged<T>(name: string, change: WorkflowChange): Promise<T> {
    return this.#endsAt(name, new WorkflowChangedError(change));
  }

  /** A recorded step that the code now calls otherwise (`why`): the run diverged there. */
  #recordedOtherwise<T>(name: string, stored: StoredStep, called: StepType, why: string): Promise<T> {
    return this.#diverged(name, this.#change(name, stored.position, stored.type, called, why));
  }

  /** The attempt ends at step `name` with `ended` (runWorkflow hears it), and the step's promise never
   * settles, so no code of the run goes on in this attempt. */
  #endsAt<T>(name: string, ended: ReplayReached | WorkflowChangedError): Promise<T> {
    this.#parkedAt ??= name;
    this.#endAttempt(ended);
    return new Promise<T>(() => {});
  }

  /** The step's result as JSON; one that cannot be stored fails the run for good, at once: it would
   * fail the same way at every try, each running the step's function again. */
  #resultJson(name: string, value: unknown): string | null {
    let json: string | null;
    try {
      json = toJson(value, `step ${name}'s result`);
    } catch (error) {
      throw new PermanentJobError(`workflow ${this.#kind}: ${(error as Error).message}`);
    }
    if (json !== null && longerThan(json, MAX_RESULT_BYTES))
      throw new PermanentJobError(
        `workflow ${this.#kind}: step ${name}'s result is ${utf8Length(json)} bytes of JSON; a step's result is at ` +
          `most ${MAX_RESULT_BYTES}`,
      );
    return json;
  }

  #written(notHeld: NotHeld | null): void {
    if (notHeld) throw this.#notHeldError(notHeld);
  }

  #notHeldError(why: NotHeld): Error {
    return why === 'cancelled'
      ? new JobCancelledError(`job ${this.#ctx.job.id} was cancelled while it ran`)
      : new LeaseLostError(`job ${this.#ctx.job.id}: its lease was lost; the step's record was not written`);
  }

  /** The step threw: its error is recorded for readers (best effort), unless the run was given up. */
  async #failed(record: StepRecord, error: unknown): Promise<void> {
    if (
      error instanceof RunParked ||
      error instanceof LeaseLostError ||
      error instanceof JobCancelledError ||
      this.#ctx.signal.aborted
    )
      return;
    await recordStepFailed(this.#db, record, errorText(error)).catch(() => {});
  }
}

/** A step's options, checked before it runs (a mistake names the step). */
function checkStepOptions(name: string, options: StepOptions): void {
  const { maxAttempts, timeoutMs, backoff } = options;
  if (
    maxAttempts !== undefined &&
    !(Number.isInteger(maxAttempts) && maxAttempts >= 1 && maxAttempts <= MAX_STEP_ATTEMPTS)
  )
    throw new RangeError(`step.run('${name}'): maxAttempts must be an integer from 1 to ${MAX_STEP_ATTEMPTS}`);
  if (
    timeoutMs !== undefined &&
    !(Number.isInteger(timeoutMs) && timeoutMs >= 1 && timeoutMs <= MAX_SLEEP_SECONDS * 1000)
  )
    throw new RangeError(`step.run('${name}'): timeoutMs must be a whole number of milliseconds from 1 to a year`);
  for (const field of ['baseSeconds', 'capSeconds'] as const) {
    const value = backoff?.[field];
    if (value !== undefined && !(Number.isFinite(value) && value >= 0 && value <= MAX_SLEEP_SECONDS))
      throw new RangeError(`step.run('${name}'): backoff.${field} must be a number of seconds from 0 to a year`);
  }
}

/** The wait before a step's next try: the job retry's rule (doubling from baseSeconds, jitter, capped). */
function backoffMs(backoff: Backoff | undefined, tries: number): number {
  const base = backoff?.baseSeconds ?? 1;
  const cap = backoff?.capSeconds ?? 3600;
  return Math.min(cap, base * 2 ** (tries - 1) * (0.5 + Math.random() / 2)) * 1000;
}

/** One try of a step: its signal (the run's, and its own timeout), and what it waits for, cut short then. */
class StepTry {
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #onRunAbort: () => void;
  readonly #runSignal: AbortSignal;
  #reject: (error: unknown) => void = () => {};

  constructor(runSignal: AbortSignal, name: string, timeoutMs: number | undefined) {
    this.#runSignal = runSignal;
    this.#onRunAbort = () => this.#abort(runSignal.reason);
    if (runSignal.aborted) this.#onRunAbort();
    else runSignal.addEventListener('abort', this.#onRunAbort, { once: true });
    if (timeoutMs !== undefined)
      this.#timer = setTimeout(
        () => this.#abort(new StepTimeoutError(`step ${name} timed out after ${timeoutMs} ms`)),
        timeoutMs,
      );
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  #abort(reason: unknown): void {
    if (this.#controller.signal.aborted) return;
    this.#controller.abort(reason);
    this.#reject(reason);
  }

  /** `work`, unless the try is cut short first; a step that ignores its signal is not waited for. */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.#controller.signal.aborted) {
      work.catch(() => {});
      return Promise.reject(this.#controller.signal.reason);
    }
    return new Promise<T>((resolve, reject) => {
      this.#reject = reject;
      work.then(resolve, reject);
    });
  }

  end(): void {
    clearTimeout(this.#timer);
    this.#runSignal.removeEventListener('abort', this.#onRunAbort);
  }
}
