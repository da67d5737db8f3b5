// pgdrain/testing: a workflow run to its end inside a test, against a real PostgreSQL, in the test's
// own process, with a virtual clock. The run is enqueued and drained like any job; between drains:
//
//   waiting for an event the test gave       the event is sent (sendEvent), as if it arrived then
//   snoozed (a sleep, a wait's timeout, a    the clock skips ahead to that moment (skipRunAhead:
//   step's next try)                         the run's moments move, the job is due now)
//   waiting for a child                      the child runs in the same drain (its kind in `jobs`)
//   finished                                 the result, the status and the steps are returned
//
// Steps named in `steps` are stubbed: their function (or their child) is replaced by the stub's value,
// recorded like any result, so the rest of the run sees what it would have. Only the run's own moments
// are virtual: Date.now() in the run's code is the real clock.
//
// The test's runs are its own: the run and the children it invokes are enqueued on a version of their
// kind that only this call's drains have (above any version code may define), so a `pgdrain start`
// with the same kinds on the same database claims none of them, and two tests of one workflow at once
// never run each other's run with their stubs. A stub or an event that no step of the run names fails
// the test, saying which: a misspelt name is not ignored.
import { drain } from '../drain/index.ts';
import { MAX_KIND_VERSION } from '../jobs/definition.ts';
import { type JobDefinition, JobRegistry } from '../jobs/registry.ts';
import { enqueue } from '../jobs/enqueue.ts';
import { type Db, type StoredStep, getJob, loadSteps, skipRunAhead } from '../queries/index.ts';
import { sendEvent, type WorkflowEvent } from './events.ts';
import { type StepContext, type Workflow, type WorkflowStep, defineWorkflow } from './index.ts';

/** A stubbed step's value, or a function of the step's context that returns it. */
export type StepStub = unknown | ((ctx: StepContext) => unknown);

export interface TestWorkflowOptions {
  /** Your database (a Drizzle database on node-postgres), migrated: the run's rows live there. */
  db: Db;
  /** Events the run will wait for: each is sent once the run waits on its name and key. */
  events?: readonly WorkflowEvent[];
  /** Steps to stub, by name: step.run's function or step.invoke's child is not run; the step returns this. */
  steps?: Readonly<Record<string, StepStub>>;
  /** Kinds of the children the run invokes and does not stub: they run in the same drains. */
  jobs?: readonly JobDefinition<any>[];
  /** Drains before it gives up (a run that never ends). Default 1,000. */
  maxRounds?: number;
}

export interface TestWorkflowResult<Result> {
  id: string;
  /** completed, dead or cancelled; `waiting` when it waits for an event the test did not give. */
  status: string;
  result: Result | undefined;
  lastError: string | null;
  steps: StoredStep[];
  /** How far the virtual clock skipped ahead in all (ms): sleeps, timeouts, steps' backoffs. */
  skippedMs: number;
}

/** Runs `definition` with `payload` to its end (or to a wait nothing answers), on a virtual clock. */
export async function testWorkflow<Payload, Result>(
  definition: Workflow<Payload, Result>,
  payload: Payload,
  options: TestWorkflowOptions,
): Promise<TestWorkflowResult<Result>> {
  const { db, steps: stubs = {}, jobs = [], maxRounds = 1_000 } = options;
  const version = privateVersion();
  const children = new Map(jobs.map((job) => [job.kind, atVersion(job, version)]));
  const stubbed = atVersion(
    defineWorkflow<Payload, Result>({
      ...definition,
      run: (input, step, ctx) => definition.run(input, withStubs(step, stubs, children, version), ctx),
    }),
    version,
  );
  const registry = new JobRegistry([stubbed, ...children.values()]);
  const events = [...(options.events ?? [])];
  const { id } = await enqueue(db, stubbed, payload);
  let skippedMs = 0;
  for (let round = 0; round < maxRounds; round++) {
    await drain(db, registry, { workerId: 'pgdrain-testing', pollIntervalMs: 50 });
    const job = await getJob(db, id);
    const steps = await loadSteps(db, id);
    const finished = {
      id,
      result: job?.result as Result | undefined,
      lastError: job?.lastError ?? null,
      steps,
      skippedMs,
    };
    if (!job || ['completed', 'dead', 'cancelled'].includes(job.status)) {
      checkNamesUsed(definition.kind, steps, stubs, events, true);
      return { ...finished, status: job?.status ?? 'deleted' };
    }
    const waits = steps.filter((s) => s.status === 'waiting' && s.event !== null);
    const answer = events.findIndex((e) => waits.some((w) => w.event === e.event && w.eventKey === e.key));
    if (answer >= 0) {
      await sendEvent(db, events.splice(answer, 1)[0]!);
      continue;
    }
    if (job.status === 'pending') {
      skippedMs += await skipRunAhead(db, id);
      continue;
    }
    const waitingFor = steps.filter((s) => s.status === 'waiting' && s.childId !== null);
    // Waiting for events the test did not give, and for nothing else: that is where it stays.
    if (waitingFor.length === 0) {
      checkNamesUsed(definition.kind, steps, stubs, events, false);
      return { ...finished, status: 'waiting' };
    }
    for (const { childId, name } of waitingFor) {
      const child = await getJob(db, childId!);
      if (child && !registry.get(child.kind))
        throw new Error(
          `testWorkflow: the run waits for job ${childId} (step ${name}) of kind ${child.kind}; pass its kind in ` +
            `jobs, or stub the step`,
        );
      // A child waiting out its retry's backoff: the clock skips ahead for it too.
      if (child?.status === 'pending') skippedMs += await skipRunAhead(db, childId!);
    }
  }
  throw new Error(`testWorkflow: the run of ${definition.kind} did not end within ${maxRounds} drains`);
}

/** Versions of a kind that code may define end at MAX_KIND_VERSION; a test's run takes one above it,
 * drawn at random, which no drainer but the test's has (the column holds up to 2^31 - 1). */
function privateVersion(): number {
  return MAX_KIND_VERSION + 1 + Math.floor(Math.random() * 2 ** 30);
}

/** `definition` at `version`, past defineJob's bounds on purpose (privateVersion). */
function atVersion<D extends JobDefinition<any>>(definition: D, version: number): D {
  return { ...definition, version };
}

/**
 * A stub or an event that no step of the run names is a mistake in the test (a misspelt name): it
 * fails, saying which and what the run has. Called where the run stops: `ended` (completed, dead,
 * cancelled) checks the stubs too; a run left waiting for events the test did not give may not have
 * reached a stubbed step yet, but an event the test gave would have been sent had any wait named it.
 */
function checkNamesUsed(
  kind: string,
  steps: readonly StoredStep[],
  stubs: Readonly<Record<string, StepStub>>,
  unsent: readonly WorkflowEvent[],
  ended: boolean,
): void {
  const names = steps.map((s) => s.name);
  const stray = Object.keys(stubs).filter((name) => !names.includes(name));
  if (ended && stray.length > 0) {
    const has = names.length > 0 ? `its steps: ${names.join(', ')}` : 'it has no steps';
    throw new Error(
      `testWorkflow: steps stubs ${stray.map((n) => `'${n}'`).join(', ')}, which no step of the ${kind} run ` +
        `has; ${has}`,
    );
  }
  if (unsent.length > 0) {
    const waits = steps.filter((s) => s.event !== null).map((w) => `${w.event} (key ${w.eventKey})`);
    throw new Error(
      `testWorkflow: events gives ${unsent.map((e) => `${e.event} (key ${e.key})`).join(', ')}, which no step of ` +
        `the ${kind} run waits for; ${waits.length > 0 ? `its waits: ${waits.join(', ')}` : 'it waits for no event'}`,
    );
  }
}

/** The run's `step`, with the stubbed steps answered by their stubs, and children enqueued on the
 * test's own version of their kind. */
function withStubs(
  step: WorkflowStep,
  stubs: Readonly<Record<string, StepStub>>,
  children: ReadonlyMap<string, JobDefinition<any>>,
  version: number,
): WorkflowStep {
  const stubFor = (name: string) => {
    const stub = stubs[name];
    return (ctx: StepContext) => (typeof stub === 'function' ? (stub as (ctx: StepContext) => unknown)(ctx) : stub);
  };
  const stubbed = (name: string) => Object.hasOwn(stubs, name);
  return {
    run: (name, fn, runOptions) =>
      stubbed(name)
        ? step.run(name, stubFor(name) as typeof fn, { ...runOptions, transactional: false })
        : step.run(name, fn, runOptions),
    patched: (id) => step.patched(id),
    sleep: (name, seconds) => step.sleep(name, seconds),
    sleepUntil: (name, until) => step.sleepUntil(name, until),
    waitForEvent: (name, waitOptions) => step.waitForEvent(name, waitOptions),
    // A kind not in `jobs` too: its child then waits unclaimed, and the test says to pass its kind.
    invoke: (name, job, input, enqueueOptions) =>
      stubbed(name)
        ? step.run(name, stubFor(name))
        : step.invoke(name, children.get(job.kind) ?? atVersion(job, version), input, enqueueOptions),
  } as WorkflowStep;
}
