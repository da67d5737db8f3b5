// The kinds the drainers define (GET /kinds: pgdrain.kinds, as each drainer wrote it at its start).
// A kind for every drainer: pause and resume it (the claim reads pgdrain.paused_kinds), and give
// one of its group keys limits of its own (pgdrain.group_limits, read by the limited claim).
import type { Context, Hono } from 'hono';
import { KIND_PATTERN, MAX_GROUP_KEY_LENGTH } from '../../db/schema.ts';
import { keyProblem } from '../../db/constants.ts';
import { removeGroupLimits, setGroupLimits } from '../../jobs/group-limits.ts';
import { deleteSubscription, kindInQueue, listKinds, pauseKind, resumeKind } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { type KindList, groupLimitsInput } from '../contract.ts';
import { ApiError } from '../errors.ts';
import { parseInput, readJson } from '../input.ts';
import { describe } from '../openapi.ts';

/** The path's kind, if it is registered here or in the queue (another drainer pool may handle it); else 404. */
async function knownKind(c: Context<AppEnv>): Promise<string> {
  const kind = c.req.param('kind') ?? '';
  const { registry, withDb } = c.var.api;
  const known =
    KIND_PATTERN.test(kind) && (registry.get(kind) !== undefined || (await withDb((db) => kindInQueue(db, kind))));
  if (!known) {
    throw new ApiError(
      404,
      'not_found',
      `unknown job kind ${JSON.stringify(kind.slice(0, 100))}: not registered here and no such jobs in the queue; ` +
        `registered kinds: ${registry.kinds().join(', ')}`,
    );
  }
  return kind;
}

/** The path's group key, checked as a key in a body is (1 to 200 characters, no NUL), else 400. */
function groupKeyOf(c: Context<AppEnv>): string {
  const key = c.req.param('groupKey') ?? '';
  const problem = keyProblem(key, MAX_GROUP_KEY_LENGTH);
  if (problem) throw new ApiError(400, 'invalid_request', `groupKey: ${problem}`);
  return key;
}

/**
 * A key's own limits are read only by the claim of a kind limited across drainers (any of
 * globalConcurrency, groupConcurrency, rateLimit), and its own rate only for a rate limited per
 * group: a row for any other kind registered here would do nothing, so it is refused (422) saying
 * why. A kind only other drainers register is taken as it is: this one cannot see its limits.
 */
function refuseLimitsThatDoNothing(c: Context<AppEnv>, kind: string, withRate: boolean): void {
  const definition = c.var.api.registry.get(kind);
  if (!definition) return;
  const { globalConcurrency, groupConcurrency, rateLimit } = definition;
  if (globalConcurrency === undefined && groupConcurrency === undefined && rateLimit === undefined) {
    throw new ApiError(
      422,
      'not_limited',
      `kind ${kind} is claimed without limits (it has no globalConcurrency, groupConcurrency or rateLimit): a key's ` +
        `own limits would do nothing; give the kind a limit first`,
    );
  }
  if (withRate && !rateLimit?.perGroup) {
    throw new ApiError(
      422,
      'not_limited',
      `kind ${kind} has no rateLimit with perGroup: true, so a key's own rate would do nothing; give only ` +
        `concurrency, or limit the kind's rate per group`,
    );
  }
}

export function kindRoutes(app: Hono<AppEnv>): void {
  app.get('/kinds', describe.kinds, access('read'), async (c) => {
    const { registry, withDb } = c.var.api;
    const stored = await withDb((db) => listKinds(db));
    return c.json({
      kinds: stored.map((k) => ({
        kind: k.kind,
        version: k.version,
        options: k.options,
        writtenBy: k.writtenBy,
        writtenAt: k.writtenAt.toISOString(),
        registeredHere: registry.get(k.kind) !== undefined,
      })),
    } satisfies KindList);
  });

  app.put('/kinds/:kind/groups/:groupKey/limits', describe.setGroupLimits, access('admin'), async (c) => {
    const groupKey = groupKeyOf(c);
    const input = parseInput(groupLimitsInput, await readJson(c), '');
    const kind = await knownKind(c);
    refuseLimitsThatDoNothing(c, kind, input.rateLimit !== undefined);
    await c.var.api.withDb((db) => setGroupLimits(db, { kind, groupKey, ...input }));
    // Jobs the old limits held back may be claimed now.
    c.var.api.jobsDue?.(new Date());
    return c.json({ kind, groupKey, concurrency: input.concurrency ?? null, rateLimit: input.rateLimit ?? null });
  });

  app.delete('/kinds/:kind/groups/:groupKey/limits', describe.removeGroupLimits, access('admin'), async (c) => {
    const groupKey = groupKeyOf(c);
    const kind = await knownKind(c);
    const removed = await c.var.api.withDb((db) => removeGroupLimits(db, { kind, groupKey }));
    c.var.api.jobsDue?.(new Date());
    return c.json({ kind, groupKey, removed });
  });

  for (const action of ['pause', 'resume'] as const) {
    app.post(
      `/kinds/:kind/${action}`,
      action === 'pause' ? describe.pauseKind : describe.resumeKind,
      access('admin'),
      async (c) => {
        const kind = await knownKind(c);
        const { withDb } = c.var.api;
        await withDb((db) => (action === 'pause' ? pauseKind(db, kind) : resumeKind(db, kind)));
        // Its ready jobs may be claimed again now.
        if (action === 'resume') c.var.api.jobsDue?.(new Date());
        return c.json({ kind, paused: action === 'pause' });
      },
    );
  }

  // A retired kind's subscription to an event (it is kept until removed: a rolling deploy loses nothing).
  app.delete('/kinds/:kind/subscriptions/:event', describe.unsubscribe, access('admin'), async (c) => {
    const kind = c.req.param('kind');
    const event = c.req.param('event');
    // A kind's and an event's names have one pattern: a name outside it was never subscribed.
    const removed =
      KIND_PATTERN.test(kind) &&
      KIND_PATTERN.test(event) &&
      (await c.var.api.withDb((db) => deleteSubscription(db, kind, event)));
    if (!removed) {
      const [named, of] = [kind, event].map((name) => JSON.stringify(name.slice(0, 100)));
      throw new ApiError(404, 'not_found', `kind ${named} has no subscription to event ${of}`);
    }
    return c.json({ kind, event, unsubscribed: true as const });
  });
}
