// Repairs, for admin tokens: retry or delete one job, and the same for every dead job (of a kind)
// in bounded batches (src/queries/dead-bulk.ts).
import type { Hono } from 'hono';
import { deleteDeadJobs, deleteJob, retryDead, retryDeadJobs, retryFromStep } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { bulkInput, retryInput } from '../contract.ts';
import { ApiError, jobNotFound } from '../errors.ts';
import { jobIdParam, parseInput, readOptionalJson } from '../input.ts';
import { describe } from '../openapi.ts';
import { jobJson } from './jobs.ts';

/** A bulk request stops after this many batches (DEAD_BATCH jobs each) and says `done: false`. */
export const MAX_BULK_BATCHES = 200;

export function adminRoutes(app: Hono<AppEnv>): void {
  app.post('/jobs/retry-dead', describe.retryDead, access('admin'), async (c) => {
    const { kind } = parseInput(bulkInput, await readOptionalJson(c), '');
    const result = await c.var.api.withDb((db) => retryDeadJobs(db, { kind, maxBatches: MAX_BULK_BATCHES }));
    if (result.count > 0) c.var.api.jobsDue?.(new Date());
    return c.json({ retried: result.count, done: result.done });
  });

  app.post('/jobs/delete-dead', describe.deleteDead, access('admin'), async (c) => {
    const { kind } = parseInput(bulkInput, await readOptionalJson(c), '');
    const result = await c.var.api.withDb((db) => deleteDeadJobs(db, { kind, maxBatches: MAX_BULK_BATCHES }));
    return c.json({ deleted: result.count, done: result.done });
  });

  app.post('/jobs/:id/retry', describe.retryJob, access('admin'), async (c) => {
    const id = jobIdParam(c);
    const { fromStep } = parseInput(retryInput, await readOptionalJson(c), '');
    if (fromStep !== undefined) {
      const restarted = await c.var.api.withDb((db) => retryFromStep(db, id, fromStep));
      if (restarted.outcome === 'not_found') throw jobNotFound(id);
      if (restarted.outcome === 'live')
        throw new ApiError(
          409,
          'live',
          `job ${id} is ${restarted.status}; a run is restarted from a step once it has finished`,
        );
      if (restarted.outcome === 'unknown_step') {
        const known =
          restarted.steps.length > 0 ? `its steps: ${restarted.steps.slice(0, 50).join(', ')}` : 'it has no steps';
        throw new ApiError(
          400,
          'unknown_step',
          `fromStep: job ${id} has no step named ${JSON.stringify(fromStep)}; ${known}`,
        );
      }
      c.var.api.jobsDue?.(restarted.job.runAt);
      return c.json(jobJson(restarted.job, c.var.api.registry));
    }
    const result = await c.var.api.withDb((db) => retryDead(db, id));
    if (result.outcome === 'not_found') throw jobNotFound(id);
    if (result.outcome === 'not_dead')
      throw new ApiError(409, 'not_dead', `job ${id} is ${result.status}; only dead jobs can be retried`);
    c.var.api.jobsDue?.(result.job.runAt);
    return c.json(jobJson(result.job, c.var.api.registry));
  });

  app.delete('/jobs/:id', describe.deleteJob, access('admin'), async (c) => {
    const id = jobIdParam(c);
    const result = await c.var.api.withDb((db) => deleteJob(db, id));
    if (result.outcome === 'not_found') throw jobNotFound(id);
    if (result.outcome === 'running')
      throw new ApiError(409, 'running', `job ${id} is running; wait until it settles, then delete it`);
    return c.body(null, 204);
  });
}
