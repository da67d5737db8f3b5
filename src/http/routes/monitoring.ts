// For machines watching the queue: GET /healthz (no token) and GET /metrics (Prometheus text; the
// API token, a read token, or the metrics-only token).
import type { Hono } from 'hono';
import { countTotals, ping, tableHealth } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { PROMETHEUS_CONTENT_TYPE, renderMetrics } from '../metrics.ts';
import { describe } from '../openapi.ts';
import { statsWithLimits } from './queue.ts';

export function monitoringRoutes(app: Hono<AppEnv>): void {
  app.get('/healthz', describe.health, access('open'), async (c) => {
    try {
      await c.var.api.withDb((db) => ping(db));
      return c.json({ ok: true });
    } catch (error) {
      c.var.api.onError?.(error, 'healthz');
      return c.json(
        { ok: false, error: { code: 'database_unavailable', message: 'the database does not answer' } },
        503,
      );
    }
  });

  app.get('/metrics', describe.metrics, access({ scope: 'read', metricsToken: true }), async (c) => {
    const [queue, totals, health] = await c.var.api.withDb((db) =>
      // The table's health needs statistics views a restricted role may not read: left out then.
      Promise.all([statsWithLimits(db, c.var.api.registry), countTotals(db), tableHealth(db).catch(() => undefined)]),
    );
    return c.body(renderMetrics(queue, totals, c.var.api.registry.kinds(), health), 200, {
      'Content-Type': PROMETHEUS_CONTENT_TYPE,
      'Cache-Control': 'no-store',
    });
  });
}
