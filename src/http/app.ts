// The HTTP API: one Hono app, runtime-neutral, served by the Worker and by the sidecar. It gets
// its database (per request, for the Worker's per-invocation Pool), registry and tokens from the
// shell that serves it, and imports nothing Node-only or Workers-only. The routes are in
// ./routes/, one file per group, each route declaring its access with access() (./auth.ts).
import { Hono } from 'hono';
import { access } from './auth.ts';
import type { ApiConfig, AppEnv } from './context.ts';
import { ApiError, answerError } from './errors.ts';
import { adminRoutes } from './routes/admin.ts';
import { eventRoutes } from './routes/events.ts';
import { jobRoutes } from './routes/jobs.ts';
import { kindRoutes } from './routes/kinds.ts';
import { monitoringRoutes } from './routes/monitoring.ts';
import { pageRoutes } from './routes/pages.ts';
import { queueRoutes } from './routes/queue.ts';

export { parseScopedTokens, TOKEN_SCOPES, type ScopedToken, type TokenScope } from './auth.ts';
export { DEFAULT_MAX_BODY_BYTES, type ApiConfig, type ApiRuntime, type FinishedJobs, type WithDb } from './context.ts';
export { isDatabaseUnavailable } from '../db/errors.ts';
export { MAX_JSON_DEPTH } from './input.ts';
export { MAX_RUN_NOW } from './routes/jobs.ts';
export { MAX_BULK_BATCHES } from './routes/admin.ts';
export { DASHBOARD_REFRESH_SECONDS } from './routes/pages.ts';

export function createApp(config: ApiConfig): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const runtimeOf = typeof config === 'function' ? config : () => config;

  app.use('*', async (c, next) => {
    c.set('api', runtimeOf(c));
    // This middleware's own route: '/*' at the root, '/queue/*' under myApp.route('/queue', app).
    const basePath = c.req.routePath.replace(/\/?\*$/, '');
    c.set('basePath', basePath);
    // The mounted app's page is at '/queue'; '/queue/' is the same page, not an API path.
    if (basePath !== '' && c.req.method === 'GET' && c.req.path === `${basePath}/`) return c.redirect(basePath, 308);
    await next();
  });

  monitoringRoutes(app);
  pageRoutes(app);
  jobRoutes(app);
  eventRoutes(app);
  adminRoutes(app);
  queueRoutes(app);
  kindRoutes(app);
  answerOtherMethods(app);

  // An unknown route answers 404 to a caller with a valid token, 401 to anyone else.
  app.notFound(async (c) => {
    await access('any')(c, async () => {});
    throw new ApiError(404, 'not_found', 'no such route; see the README for the API');
  });
  app.onError(answerError);
  return app;
}

/**
 * A known path with another method: 405 with the methods it has (OPTIONS: 204 and the same Allow
 * header), not a 404 that would say the path does not exist. Like an unknown route, it needs a token.
 */
function answerOtherMethods(app: Hono<AppEnv>): void {
  const methodsByPath = new Map<string, Set<string>>();
  for (const route of app.routes) {
    if (route.method === 'ALL') continue;
    const methods = methodsByPath.get(route.path) ?? new Set<string>();
    methods.add(route.method);
    if (route.method === 'GET') methods.add('HEAD');
    methodsByPath.set(route.path, methods);
  }
  for (const [path, methods] of methodsByPath) {
    const allow = [...methods, 'OPTIONS'].join(', ');
    app.all(path, access('any'), (c) => {
      if (c.req.method === 'OPTIONS') return c.body(null, 204, { Allow: allow });
      c.header('Allow', allow);
      throw new ApiError(405, 'method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}; use ${allow}`);
    });
  }
}
