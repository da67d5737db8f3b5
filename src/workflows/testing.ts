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
import { drain } from '../drain/index.ts';
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
  const stubbed = defineWorkflow<Payload, Result>({
    ...definition,
    run: (input, step, ctx) => definition.run(input, withStubs(step, stubs), ctx),
  });
  const registry = new JobRegistry([stubbed, ...jobs]);
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
    if (!job || ['completed', 'dead', 'cancelled'].includes(job.status))
      return { ...finished, status: job?.status ?? 'deleted' };
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
    const children = steps.filter((s) => s.status === 'waiting' && s.childId !== null);
    // Waiting for events the test did not give, and for nothing else: that is where it stays.
    if (children.length === 0) return { ...finished, status: 'waiting' };
    for (const { childId, name } of children) {
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

/** The run's `step`, with the stubbed steps answered by their stubs. */
function withStubs(step: WorkflowStep, stubs: Readonly<Record<string, StepStub>>): WorkflowStep {
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
    invoke: (name, job, input, enqueueOptions) =>
      stubbed(name) ? step.run(name, stubFor(name)) : step.invoke(name, job, input, enqueueOptions),
  } as WorkflowStep;
}
