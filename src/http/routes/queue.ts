// The queue at a glance: GET /stats, GET /stats/throughput, GET /schedules.
import type { Hono } from 'hono';
import { countsByMinute, stats } from '../../queries/index.ts';
import { describeSchedules } from '../../schedules.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { throughputQuery } from '../contract.ts';
import { parseInput } from '../input.ts';
import { describe } from '../openapi.ts';

export function queueRoutes(app: Hono<AppEnv>): void {
  app.get('/stats', describe.stats, access('read'), async (c) => c.json(await c.var.api.withDb((db) => stats(db))));

  app.get('/stats/throughput', describe.throughput, access('read'), async (c) => {
    const query = parseInput(throughputQuery, c.req.query(), 'query.');
    const minutes = await c.var.api.withDb((db) => countsByMinute(db, { minutes: query.minutes, kind: query.kind }));
    return c.json({ minutes: minutes.map((m) => ({ minute: m.minute.toISOString(), completed: m.completed, failed: m.failed, dead: m.dead })) });
  });

  app.get('/schedules', describe.schedules, access('read'), async (c) => {
    const schedules = c.var.api.schedules ?? [];
    return c.json({ schedules: await c.var.api.withDb((db) => describeSchedules(db, schedules)) });
  });
}
