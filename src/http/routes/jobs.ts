// Enqueue and read jobs: POST /jobs, POST /jobs/batch, GET /jobs, GET /jobs/:id (?waitSeconds: wait
// for it to finish), POST /jobs/:id/cancel.
import type { Context, Hono } from 'hono';
import { FINAL_STATUSES } from '../../db/schema.ts';
import { type EnqueueRequest, prepareEnqueue } from '../../jobs/enqueue.ts';
import { JobValidationError, type JobRegistry } from '../../jobs/registry.ts';
import {
  type Db,
  deadLetterOf,
  UnknownDependencyError,
  cancel,
  getFinishedJob,
  getJob,
  getJobLinks,
  listJobs,
  loadSteps,
  watchJob,
} from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { ApiRuntime, AppEnv } from '../context.ts';
import {
  type GoneJob,
  type Job as JobBody,
  type JobInput,
  batchInput,
  getJobQuery,
  jobInput,
  listQuery,
} from '../contract.ts';
import { jobJson, jobSummaryJson, stepJson } from '../job-json.ts';
import { ApiError, jobNotFound } from '../errors.ts';
import { jobIdParam, parseInput, readJson } from '../input.ts';
import { describe } from '../openapi.ts';

/** A batch starts at most this many jobs at once with runNow; the rest wait for the drainer. */
export const MAX_RUN_NOW = 20;

export function jobRoutes(app: Hono<AppEnv>): void {
  enqueueRoutes(app);
  readAndCancelRoutes(app);
}

/** POST /jobs and POST /jobs/batch. */
function enqueueRoutes(app: Hono<AppEnv>): void {
  app.post('/jobs', describe.enqueue, access('enqueue'), async (c) => {
    const input = parseInput(jobInput, await readJson(c), '');
    const prepared = prepare(c, [input], '');
    const [result] = await c.var.api.withDb((db) => prepared.send(db)).catch(refuseUnknownDependency(''));
    if (!result) throw new Error('enqueue: no job came back');
    // After the commit: the runner claims it like any drainer, so whoever gets it first runs it.
    const runNow = wantsRunNow(c.var.api, input) && result.status === 'pending' && c.var.api.runNow !== undefined;
    if (runNow) c.var.api.runNow!([result.id]);
    // Otherwise whoever drains is told when it is due (the Worker's clock).
    else if (result.status === 'pending' && !result.deduplicated) c.var.api.jobsDue?.(result.runAt);
    const body = { id: result.id, status: result.status, runAt: result.runAt.toISOString() };
    if (result.replaced) return c.json({ ...body, deduplicated: true as const, replaced: true as const }, 200);
    return result.deduplicated ? c.json({ ...body, deduplicated: true as const }, 200) : c.json(body, 201);
  });

  app.post('/jobs/batch', describe.enqueueBatch, access('enqueue'), async (c) => {
    const input = parseInput(batchInput, await readJson(c), '');
    const prepared = prepare(c, input.jobs, 'jobs');
    // Stored whole or not at all (one statement, or one transaction where jobs go one by one, which
    // stops and rolls back if the client goes away).
    const result = await c.var.api
      .withDb((db) => prepared.send(db, c.req.raw.signal))
      .catch(refuseUnknownDependency('jobs: '));
    const ids = result.map((j) => j.id);
    const asked = c.var.api.runNow
      ? result.filter((j, i) => wantsRunNow(c.var.api, input.jobs[i]!) && j.status === 'pending').map((j) => j.id)
      : [];
    // At most MAX_RUN_NOW start in this invocation; the answer says how many wait for the drainer.
    const started = asked.slice(0, MAX_RUN_NOW);
    const runningNow = new Set(started);
    const earliest = result
      .filter((j) => j.status === 'pending' && !j.deduplicated && !runningNow.has(j.id))
      .reduce<Date | null>((at, j) => (at === null || j.runAt < at ? j.runAt : at), null);
    if (earliest) c.var.api.jobsDue?.(earliest);
    if (started.length === 0) return c.json({ ids }, 201);
    c.var.api.runNow!(started);
    return c.json({ ids, runNow: { started: started.length, deferred: asked.length - started.length } }, 201);
  });
}

/** GET /jobs, GET /jobs/:id and POST /jobs/:id/cancel. */
function readAndCancelRoutes(app: Hono<AppEnv>): void {
  app.get('/jobs', describe.listJobs, access('read'), async (c) => {
    const query = parseInput(listQuery, c.req.query(), 'query.');
    const registry = c.var.api.registry;
    const page = await c.var.api.withDb((db) =>
      listJobs(db, {
        status: query.status,
        kind: query.kind,
        dedupeKey: query.dedupeKey,
        groupKey: query.groupKey,
        payloadContains: query.payload,
        hiddenPayloadKinds: registry.kinds().filter((kind) => registry.get(kind)?.redactPayload),
        limit: query.limit,
        before: query.cursor,
      }),
    );
    return c.json({ jobs: page.jobs.map((j) => jobSummaryJson(j, c.var.api.registry)), nextCursor: page.nextCursor });
  });

  app.get('/jobs/:id', describe.getJob, access('read'), async (c: Context<AppEnv>) => {
    const id = jobIdParam(c);
    const { waitSeconds } = parseInput(getJobQuery, c.req.query(), 'query.');
    if (waitSeconds !== undefined) return c.json(await waitForJob(c.var.api, id, waitSeconds));
    const found = await c.var.api.withDb(async (db) => {
      const job = await getJob(db, id);
      return job ? jobInFull(db, jobJson(job, c.var.api.registry)) : null;
    });
    if (!found) throw jobNotFound(id);
    return c.json(found);
  });

  app.post('/jobs/:id/cancel', describe.cancelJob, access('admin'), async (c) => {
    const id = jobIdParam(c);
    const result = await c.var.api.withDb((db) => cancel(db, id));
    if (result.outcome === 'not_found') throw jobNotFound(id);
    if (result.outcome === 'not_cancellable')
      throw new ApiError(
        409,
        'not_cancellable',
        `job ${id} is ${result.status}; only a pending, waiting or running job can be cancelled`,
      );
    if (result.outcome === 'cancelling')
      return c.json({ id, status: 'running' as const, cancelRequested: true as const }, 202);
    return c.json({ id, status: 'cancelled' as const, cancelRequested: true as const }, 200);
  });
}

/** Nothing more will happen to it: completed, dead, cancelled (or deleted, for a GoneJob). */
const isFinal = (status: string) => status === 'deleted' || (FINAL_STATUSES as readonly string[]).includes(status);
/** Without the runtime's notifications (the Worker), a waiting request reads the job after this,
 * then twice as long each time up to WAIT_POLL_MAX_MS, each spread by a fifth either way so that
 * waits begun together do not look together. */
const WAIT_POLL_MS = 250;
const WAIT_POLL_MAX_MS = 2_000;
/** With them (the sidecar), it still reads it this often, in case a notification is lost. */
const WAIT_RECHECK_MS = 1_000;

/**
 * GET /jobs/:id?waitSeconds: the job as soon as it is completed, dead or cancelled, else after
 * `seconds` as it is then. The job is marked watched first, so that the statement that finishes
 * it announces it (NOTIFY pgdrain_finished) and, if it deletes the row, leaves a note of how it
 * ended. Each look at the job takes a connection and gives it back: a wait holds none while it
 * waits, so a flood of waits cannot use up the database's connections (the Worker's are one per
 * withDb).
 */
async function waitForJob(api: ApiRuntime, id: string, seconds: number): Promise<JobBody | GoneJob> {
  const deadline = Date.now() + seconds * 1000;
  const heard = new LatchedWakeup();
  const unsubscribe = api.finishedJobs?.subscribe(id, () => heard.wake()) ?? (() => {});
  const look = (first: boolean) =>
    api.withDb(async (db) => {
      let current = await readJobOrNote(db, id, api.registry);
      if (first && current && !isFinal(current.status)) {
        await watchJob(db, id, seconds);
        current = await readJobOrNote(db, id, api.registry);
      }
      const done = !current || isFinal(current.status) || Date.now() >= deadline;
      // One resource, one shape: a workflow's steps as GET /jobs/:id has them.
      return { current: done && current && !('gone' in current) ? await jobInFull(db, current) : current, done };
    });
  try {
    let { current, done } = await look(true);
    let pause = WAIT_POLL_MS;
    while (!done) {
      const next = api.finishedJobs ? WAIT_RECHECK_MS : pause * (0.8 + Math.random() * 0.4);
      pause = Math.min(pause * 2, WAIT_POLL_MAX_MS);
      await heard.wait(Math.min(next, deadline - Date.now()));
      ({ current, done } = await look(false));
    }
    if (!current) {
      throw new ApiError(
        404,
        'not_found',
        `job ${id} does not exist: it may have completed and been deleted before the wait began (a kind that ` +
          `keeps nothing leaves no trace; give it keepCompletedSeconds to wait for its jobs reliably)`,
      );
    }
    return current;
  } finally {
    unsubscribe();
  }
}

/** What GET /jobs/:id adds to a job: the jobs it names (after) and those naming it, a dead job's
 * dead letter, and a workflow's steps and what it waits on (primary-key range reads). */
async function jobInFull(db: Db, body: JobBody): Promise<JobBody> {
  if (body.status === 'dead') {
    const deadLetterJobId = await deadLetterOf(db, body.id);
    if (deadLetterJobId) body = { ...body, deadLetterJobId };
  }
  body = { ...body, ...(await getJobLinks(db, body.id)) };
  const stored = await loadSteps(db, body.id);
  if (stored.length === 0) return body;
  const steps = stored.map(stepJson);
  return {
    ...body,
    steps,
    // Parked: waiting (an event, a child), or pending until a sleep's end or a wait's timeout.
    waitingOn:
      body.status === 'waiting' || body.status === 'pending'
        ? (steps.find((s) => s.status === 'sleeping' || s.status === 'waiting') ?? null)
        : null,
  };
}

/** The job, or the note of how a watched job ended when its row is gone. */
async function readJobOrNote(db: Db, id: string, registry: JobRegistry): Promise<JobBody | GoneJob | null> {
  const job = await getJob(db, id);
  if (job) return jobJson(job, registry);
  const note = await getFinishedJob(db, id);
  return note
    ? {
        id: note.id,
        kind: note.kind,
        status: note.status as GoneJob['status'],
        finishedAt: note.finishedAt.toISOString(),
        gone: true,
      }
    : null;
}

/** A sleep that wake() ends early (a wake with nobody sleeping is kept for the next sleep). */
class LatchedWakeup {
  #woken = false;
  #resolve: (() => void) | undefined;

  wake(): void {
    this.#woken = true;
    this.#resolve?.();
  }

  async wait(ms: number): Promise<void> {
    if (!this.#woken) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, ms));
        this.#resolve = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.#woken = false;
    this.#resolve = undefined;
  }
}

/** An `after` naming jobs that do not exist: a 400 saying which. */
function refuseUnknownDependency(prefix: string) {
  return (error: unknown): never => {
    if (error instanceof UnknownDependencyError)
      throw new ApiError(400, 'unknown_dependency', `${prefix}${error.message}`);
    throw error;
  };
}

/** runNow on the request, or `eager` on the kind. */
function wantsRunNow(api: ApiRuntime, input: JobInput): boolean {
  return input.runNow === true || (input.runNow === undefined && api.registry.get(input.kind)?.eager === true);
}

/** The request's jobs through the enqueue pipeline: a refusal is a 4xx naming the job (`jobs[3]`). */
function prepare(c: Context<AppEnv>, inputs: readonly JobInput[], list: '' | 'jobs') {
  const requests = inputs.map((input): EnqueueRequest => {
    const { kind, payload, runAt, delaySeconds, runNow: _runNow, ...options } = input;
    const at =
      runAt !== undefined
        ? new Date(runAt)
        : delaySeconds !== undefined
          ? new Date(Date.now() + delaySeconds * 1000)
          : undefined;
    return { kind, payload, ...options, runAt: at };
  });
  try {
    return prepareEnqueue(requests, {
      registry: c.var.api.registry,
      unknownKinds: 'refuse',
      traceParent: c.req.header('traceparent'),
    });
  } catch (error) {
    if (!(error instanceof JobValidationError)) throw error;
    const at = list ? `${list}[${error.index ?? 0}]` : '';
    if (error.code === 'invalid_request') throw new ApiError(400, error.code, `${at ? `${at}.` : ''}${error.message}`);
    throw new ApiError(422, error.code, at ? `${at}: ${error.message}` : error.message);
  }
}

export { jobJson };
