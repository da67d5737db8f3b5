// Enqueue and read jobs: POST /jobs, POST /jobs/batch, GET /jobs, GET /jobs/:id.
import type { Context, Hono } from 'hono';
import { JobValidationError, type JobRegistry } from '../../jobs/registry.ts';
import { type Job, enqueue, enqueueMany, getJob, listJobs } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { ApiRuntime, AppEnv } from '../context.ts';
import { type Job as JobBody, type JobInput, batchInput, jobInput, listQuery } from '../contract.ts';
import { ApiError, jobNotFound } from '../errors.ts';
import { jobIdParam, parseInput, readJson } from '../input.ts';
import { describe } from '../openapi.ts';

/** A batch starts at most this many jobs at once with runNow; the rest wait for the drainer. */
export const MAX_RUN_NOW = 20;

export function jobRoutes(app: Hono<AppEnv>): void {
  app.post('/jobs', describe.enqueue, access('enqueue'), async (c) => {
    const input = parseInput(jobInput, await readJson(c), '');
    const job = prepare(c.var.api.registry, input, '');
    const result = await c.var.api.withDb((db) => enqueue(db, job));
    // After the commit: the runner claims it like any drainer, so whoever gets it first runs it.
    if (wantsRunNow(c.var.api, input) && result.status === 'pending') c.var.api.runNow?.([result.id]);
    const body = { id: result.id, status: result.status, runAt: result.runAt.toISOString() };
    if (result.replaced) return c.json({ ...body, deduplicated: true as const, replaced: true as const }, 200);
    return result.deduplicated ? c.json({ ...body, deduplicated: true as const }, 200) : c.json(body, 201);
  });

  app.post('/jobs/batch', describe.enqueueBatch, access('enqueue'), async (c) => {
    const input = parseInput(batchInput, await readJson(c), '');
    const jobs = input.jobs.map((j, i) => prepare(c.var.api.registry, j, `jobs[${i}].`));
    // One transaction: the batch is stored whole or not at all.
    const result = await c.var.api.withDb((db) => db.transaction((tx) => enqueueMany(tx, jobs)));
    const ids = result.map((j) => j.id);
    const asked = result.filter((j, i) => wantsRunNow(c.var.api, input.jobs[i]!) && j.status === 'pending').map((j) => j.id);
    if (asked.length === 0 || !c.var.api.runNow) return c.json({ ids }, 201);
    // At most MAX_RUN_NOW start in this invocation; the answer says how many wait for the cron.
    const started = asked.slice(0, MAX_RUN_NOW);
    c.var.api.runNow(started);
    return c.json({ ids, runNow: { started: started.length, deferred: asked.length - started.length } }, 201);
  });

  app.get('/jobs', describe.listJobs, access('read'), async (c) => {
    const query = parseInput(listQuery, c.req.query(), 'query.');
    const page = await c.var.api.withDb((db) => listJobs(db, { status: query.status, kind: query.kind, limit: query.limit, before: query.cursor }));
    return c.json({ jobs: page.jobs.map(jobJson), nextCursor: page.nextCursor });
  });

  app.get('/jobs/:id', describe.getJob, access('read'), async (c: Context<AppEnv>) => {
    const id = jobIdParam(c);
    const job = await c.var.api.withDb((db) => getJob(db, id));
    if (!job) throw jobNotFound(id);
    return c.json(jobJson(job));
  });
}

/** runNow on the request, or `eager` on the kind. */
function wantsRunNow(api: ApiRuntime, input: JobInput): boolean {
  return input.runNow === true || (input.runNow === undefined && api.registry.get(input.kind)?.eager === true);
}

function prepare(registry: JobRegistry, input: JobInput, prefix: string) {
  const runAt = input.runAt !== undefined ? new Date(input.runAt) : input.delaySeconds !== undefined ? new Date(Date.now() + input.delaySeconds * 1000) : undefined;
  try {
    return registry.prepare({
      kind: input.kind, payload: input.payload, runAt, maxAttempts: input.maxAttempts, dedupeKey: input.key, dedupeMode: input.dedupeMode,
      priority: input.priority, groupKey: input.groupKey,
    });
  } catch (error) {
    if (error instanceof JobValidationError) throw new ApiError(422, error.code, prefix ? `${prefix.slice(0, -1)}: ${error.message}` : error.message);
    throw error;
  }
}

/** A job as the API shows it; typed by the contract, so the documented shape and this one cannot drift. */
export function jobJson(job: Job): JobBody {
  return {
    id: job.id,
    kind: job.kind,
    payload: job.payload as JobBody['payload'], // read from jsonb: JSON by construction
    status: job.status,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    priority: job.priority,
    groupKey: job.groupKey,
    runAt: job.runAt.toISOString(),
    lockedAt: job.lockedAt?.toISOString() ?? null,
    lockedBy: job.lockedBy,
    lastError: job.lastError,
    createdAt: job.createdAt.toISOString(),
  };
}
