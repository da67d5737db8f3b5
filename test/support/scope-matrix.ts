// Every protected route with the scope its token needs, shared by the sidecar's and the Worker's
// tests. A route added to the app without a line here fails the completeness check.
import type { TokenScope } from '../../src/http/app.ts';

export interface ScopedRoute {
  method: string;
  path: string;
  /** The route pattern as registered, for the completeness check. */
  pattern: string;
  body?: unknown;
  needs: TokenScope;
}

export const SCOPED_ROUTES: ScopedRoute[] = [
  {
    method: 'POST',
    path: '/jobs',
    pattern: '/jobs',
    body: { kind: 'noop', payload: { scope: 'test' } },
    needs: 'enqueue',
  },
  {
    method: 'POST',
    path: '/jobs/batch',
    pattern: '/jobs/batch',
    body: { jobs: [{ kind: 'noop', payload: {} }] },
    needs: 'enqueue',
  },
  { method: 'GET', path: '/jobs', pattern: '/jobs', needs: 'read' },
  { method: 'GET', path: '/jobs/999999', pattern: '/jobs/:id', needs: 'read' },
  { method: 'POST', path: '/jobs/999999/retry', pattern: '/jobs/:id/retry', needs: 'admin' },
  { method: 'DELETE', path: '/jobs/999999', pattern: '/jobs/:id', needs: 'admin' },
  { method: 'POST', path: '/jobs/999999/cancel', pattern: '/jobs/:id/cancel', needs: 'admin' },
  {
    method: 'POST',
    path: '/jobs/retry-dead',
    pattern: '/jobs/retry-dead',
    body: { kind: 'nothing-dead' },
    needs: 'admin',
  },
  {
    method: 'POST',
    path: '/jobs/delete-dead',
    pattern: '/jobs/delete-dead',
    body: { kind: 'nothing-dead' },
    needs: 'admin',
  },
  { method: 'GET', path: '/stats', pattern: '/stats', needs: 'read' },
  { method: 'GET', path: '/stats/throughput', pattern: '/stats/throughput', needs: 'read' },
  { method: 'GET', path: '/schedules', pattern: '/schedules', needs: 'read' },
  { method: 'GET', path: '/kinds', pattern: '/kinds', needs: 'read' },
  { method: 'POST', path: '/kinds/noop/pause', pattern: '/kinds/:kind/pause', needs: 'admin' },
  { method: 'POST', path: '/kinds/noop/resume', pattern: '/kinds/:kind/resume', needs: 'admin' },
  {
    method: 'DELETE',
    path: '/kinds/noop/subscriptions/scope.test',
    pattern: '/kinds/:kind/subscriptions/:event',
    needs: 'admin',
  },
  { method: 'GET', path: '/metrics', pattern: '/metrics', needs: 'read' },
  {
    method: 'PUT',
    path: '/kinds/noop/groups/scope-test/limits',
    pattern: '/kinds/:kind/groups/:groupKey/limits',
    body: { concurrency: 2 },
    needs: 'admin',
  },
  {
    method: 'DELETE',
    path: '/kinds/noop/groups/scope-test/limits',
    pattern: '/kinds/:kind/groups/:groupKey/limits',
    needs: 'admin',
  },
  { method: 'POST', path: '/events', pattern: '/events', body: { event: 'scope.test', key: 'k' }, needs: 'enqueue' },
];

/** Routes that need no token at all. */
export const OPEN_ROUTES = [
  '/healthz',
  '/openapi.json',
  '/docs',
  '/',
  '/dashboard',
  '/dashboard/script.js',
  '/dashboard/style.css',
];

export const allows = (scope: TokenScope, needed: TokenScope) => scope === 'admin' || scope === needed;

export function requestFor(route: ScopedRoute, token: string): RequestInit {
  return {
    method: route.method,
    headers: { authorization: `Bearer ${token}`, ...(route.body ? { 'content-type': 'application/json' } : {}) },
    body: route.body ? JSON.stringify(route.body) : undefined,
  };
}
