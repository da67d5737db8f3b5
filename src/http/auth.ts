// Who may call what. Every route declares its access with access(): `open` (no token: health, the
// API's description, the dashboard's page and assets), or the scope its bearer token needs —
// `enqueue`, `read` or `admin` (admin may do everything) — and, for /metrics only, the metrics-only
// token too. Tokens are compared in constant time with every configured one.
import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { timingSafeEqual } from 'hono/utils/buffer';
import { type AppEnv, DEFAULT_MAX_BODY_BYTES } from './context.ts';
import { ApiError } from './errors.ts';
import type { ScopedToken, TokenScope } from './tokens.ts';

export { parseScopedTokens, TOKEN_SCOPES, type ScopedToken, type TokenScope } from './tokens.ts';

/** What a route needs: no token, any valid token, or one whose scope covers `scope`. */
export type Access = 'open' | 'any' | TokenScope | { scope: TokenScope; metricsToken: true };

/** admin may do everything; enqueue and read only their own. */
const allows = (scope: TokenScope, needed: TokenScope) => scope === 'admin' || scope === needed;

/**
 * The route's access check, the same for every route: authenticates the bearer token, checks its
 * scope (403 otherwise), says the scope in X-Pgdrain-Scope (the dashboard offers only what it
 * allows), and bounds the body (413).
 */
export function access(needed: Access): MiddlewareHandler<AppEnv> {
  if (needed === 'open') return async (_c, next) => next();
  const scope = typeof needed === 'string' ? needed : needed.scope;
  const withMetricsToken = typeof needed === 'object';
  return async (c, next) => {
    const api = c.var.api;
    const accepted: ScopedToken[] = [
      ...(api.apiToken ? [{ scope: 'admin' as const, token: api.apiToken }] : []),
      ...(api.scopedTokens ?? []),
      ...(withMetricsToken && api.metricsToken ? [{ scope: 'read' as const, token: api.metricsToken }] : []),
    ];
    const granted = await authenticate(c, accepted);
    if (scope !== 'any' && !allows(granted, scope)) {
      throw new ApiError(
        403,
        'forbidden',
        `this token's scope is ${granted}; ${c.req.method} ${c.req.path} ` +
          `needs ${scope === 'admin' ? 'admin' : `${scope} or admin`}`,
      );
    }
    c.set('scope', granted);
    c.header('X-Pgdrain-Scope', granted);
    const maxSize = api.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    return bodyLimit({
      maxSize,
      onError: () => {
        throw new ApiError(
          413,
          'body_too_large',
          `the request body is over the limit of ${maxSize} bytes; split a batch into smaller ones`,
        );
      },
    })(c, next);
  };
}

/** The scope of the request's bearer token among `accepted`; 401 when it is none of them. */
async function authenticate(c: Context<AppEnv>, accepted: readonly ScopedToken[]): Promise<TokenScope> {
  const misconfigured = c.var.api.misconfigured;
  if (misconfigured) throw new ApiError(503, 'not_configured', misconfigured);
  if (accepted.length === 0) {
    throw new ApiError(
      503,
      'not_configured',
      'no API token is configured: set API_TOKEN (sidecar: environment variable; Worker: `wrangler secret put ' +
        'API_TOKEN`)',
    );
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
  if (!match) throw new ApiError(401, 'unauthorized', 'send the API token as `Authorization: Bearer <token>`');
  // Every configured token is compared, so the time taken does not say which one nearly matched.
  let scope: TokenScope | undefined;
  for (const candidate of accepted)
    if ((await timingSafeEqual(match[1] as string, candidate.token)) && !scope) scope = candidate.scope;
  if (!scope) throw new ApiError(401, 'unauthorized', 'the API token is wrong');
  return scope;
}
