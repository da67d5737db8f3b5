// The queue at a glance: GET /stats, GET /stats/throughput, GET /schedules.
import type { Hono } from 'hono';
import type { JobRegistry } from '../../jobs/registry.ts';
import {
  type Db,
  countsByMinute,
  emptyKindStats,
  limitUsage,
  listGroupLimits,
  listSubscriptions,
  stats,
} from '../../queries/index.ts';
import type { QueueStats } from '../contract.ts';
import { describeSchedules } from '../../schedules.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { throughputQuery } from '../contract.ts';
import { parseInput } from '../input.ts';
import { describe } from '../openapi.ts';

export function queueRoutes(app: Hono<AppEnv>): void {
  app.get('/stats', describe.stats, access('read'), async (c) =>
    c.json(await c.var.api.withDb((db) => statsWithLimits(db, c.var.api.registry))),
  );

  app.get('/stats/throughput', describe.throughput, access('read'), async (c) => {
    const query = parseInput(throughputQuery, c.req.query(), 'query.');
    const minutes = await c.var.api.withDb((db) => countsByMinute(db, { minutes: query.minutes, kind: query.kind }));
    return c.json({
      minutes: minutes.map((m) => ({
        minute: m.minute.toISOString(),
        completed: m.completed,
        failed: m.failed,
        dead: m.dead,
      })),
    });
  });

  app.get('/schedules', describe.schedules, access('read'), async (c) => {
    const schedules = c.var.api.schedules ?? [];
    return c.json({ schedules: await c.var.api.withDb((db) => describeSchedules(db, schedules)) });
  });
}

/** The queue's counts, and for each kind limited across drainers, its limits and their use. */
export async function statsWithLimits(db: Db, registry: JobRegistry): Promise<QueueStats> {
  const limited = registry.limitedKinds();
  const [queue, usage, overrides, subscribed] = await Promise.all([
    stats(db),
    limitUsage(db, limited),
    listGroupLimits(
      db,
      limited.map((k) => k.kind),
    ),
    listSubscriptions(db),
  ]);
  const subscriptions = subscribed.map(({ event, kind, subscribedAt }) => ({
    event,
    kind,
    subscribedAt: subscribedAt.toISOString(),
  }));
  const kinds: QueueStats['kinds'] = { ...queue.kinds };
  for (const { kind, limits } of limited) {
    const used = usage[kind];
    if (!used) continue;
    kinds[kind] = {
      ...(kinds[kind] ?? emptyKindStats()),
      limits: {
        ...(limits.globalConcurrency !== undefined
          ? { globalConcurrency: { limit: limits.globalConcurrency, running: used.running } }
          : {}),
        ...(limits.groupConcurrency !== undefined
          ? { groupConcurrency: { limit: limits.groupConcurrency, keysWaiting: used.keysWaiting ?? 0 } }
          : {}),
        ...(limits.rateLimit
          ? {
              rateLimit: {
                limit: limits.rateLimit.limit,
                periodSeconds: limits.rateLimit.periodSeconds,
                perGroup: limits.rateLimit.perGroup === true,
                startsInWindow: used.startsInWindow ?? 0,
              },
            }
          : {}),
        ...(limits.fair ? { fair: true as const } : {}),
        ...(overrides[kind] && overrides[kind].count > 0
          ? {
              groupOverrides: {
                count: overrides[kind].count,
                keys: overrides[kind].keys.map(({ groupKey, concurrency, rateLimit }) => ({
                  groupKey,
                  concurrency,
                  rateLimit,
                })),
              },
            }
          : {}),
      },
    };
  }
  return { ...queue, kinds, subscriptions };
}
