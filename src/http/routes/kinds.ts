// Pause and resume a kind for every drainer (the claim reads pgdrain.paused_kinds).
import type { Hono } from 'hono';
import { KIND_PATTERN } from '../../db/schema.ts';
import { kindInQueue, pauseKind, resumeKind } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';
import { describe } from '../openapi.ts';

export function kindRoutes(app: Hono<AppEnv>): void {
  for (const action of ['pause', 'resume'] as const) {
    app.post(`/kinds/:kind/${action}`, action === 'pause' ? describe.pauseKind : describe.resumeKind, access('admin'), async (c) => {
      const kind = c.req.param('kind');
      const { registry, withDb } = c.var.api;
      // Known: registered here, or in the queue (another drainer pool may handle it).
      const known = KIND_PATTERN.test(kind) && (registry.get(kind) !== undefined || (await withDb((db) => kindInQueue(db, kind))));
      if (!known) {
        throw new ApiError(404, 'not_found', `unknown job kind ${JSON.stringify(kind.slice(0, 100))}: not registered here and no such jobs in the queue; registered kinds: ${registry.kinds().join(', ')}`);
      }
      await withDb((db) => (action === 'pause' ? pauseKind(db, kind) : resumeKind(db, kind)));
      // Its ready jobs may be claimed again now.
      if (action === 'resume') c.var.api.jobsDue?.(new Date());
      return c.json({ kind, paused: action === 'pause' });
    });
  }
}
