// One webhook request to a target the allow-list admitted (webhook-targets.ts), sent so that the
// address checked is the address dialled:
//   - on Node (the sidecar, your own process): node:http(s) with a lookup of our own: the host is
//     resolved once, every address it resolved to must be allowed, and the connection goes to
//     those addresses; an address literal is checked as it is. A second lookup (DNS rebinding)
//     never happens.
//   - on Cloudflare Workers: fetch(). The platform resolves names and connects from Cloudflare's
//     network, which reaches public addresses only; address literals are checked here.
// Redirects are never followed. Node's modules are reached through process.getBuiltinModule, so
// nothing here is bundled into a Worker.
import type { CheckedTarget, AllowList } from './webhook-targets.ts';
import { parseIp, refusedAddressProblem } from './webhook-targets.ts';
import { PgdrainError } from '../errors.ts';

export interface WebhookRequest {
  method: string;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
}

export interface WebhookAnswer {
  status: number;
  retryAfter: string | null;
}

/** The addresses a host resolves to (node:dns lookup with `all`). */
export type ResolveHost = (host: string) => Promise<readonly { address: string; family: number }[]>;

/** Sends one request to a checked target. */
export type SendWebhook = (target: CheckedTarget, request: WebhookRequest) => Promise<WebhookAnswer>;

/** The target resolved to an address the allow-list does not admit: nothing was sent. */
export class WebhookRefusedError extends PgdrainError {
  override name = 'WebhookRefusedError';
  readonly code = 'webhook_refused';
}

interface NodeModules {
  http: typeof import('node:http');
  https: typeof import('node:https');
  dns: typeof import('node:dns');
}

/** Node's modules when running on Node (not in workerd, whose node:http has no lookup). */
function nodeModules(): NodeModules | null {
  if ((globalThis as { navigator?: { userAgent?: string } }).navigator?.userAgent === 'Cloudflare-Workers') return null;
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule;
  if (typeof get !== 'function') return null;
  return {
    http: get('node:http') as NodeModules['http'],
    https: get('node:https') as NodeModules['https'],
    dns: get('node:dns') as NodeModules['dns'],
  };
}

/** How the webhook kind sends: `fetch` when given (tests, embedders), else node:http(s) on Node,
 * else the runtime's fetch. */
export function webhookSender(
  list: AllowList,
  options: { fetch?: typeof fetch; resolve?: ResolveHost } = {},
): SendWebhook {
  const node = options.fetch ? null : nodeModules();
  if (node) return (target, request) => sendWithNode(node, list, target, request, options.resolve);
  const doFetch = options.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, init));
  return async (target, request) => {
    const response = await doFetch(target.url, {
      method: request.method,
      headers: request.headers,
      body: request.body,
      redirect: 'manual',
      signal: request.signal,
    });
    // The body is not needed; release the connection.
    await response.body?.cancel().catch(() => {});
    return { status: response.status, retryAfter: response.headers.get('retry-after') };
  };
}

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | { address: string; family: number }[],
  family?: number,
) => void;

function sendWithNode(
  node: NodeModules,
  list: AllowList,
  target: CheckedTarget,
  request: WebhookRequest,
  resolve?: ResolveHost,
): Promise<WebhookAnswer> {
  const resolveHost: ResolveHost = resolve ?? ((host) => node.dns.promises.lookup(host, { all: true, verbatim: true }));
  // Called for the connection itself: what it answers is what the socket dials.
  const lookup = (hostname: string, options: { all?: boolean }, callback: LookupCallback) => {
    resolveHost(hostname).then(
      (addresses) => {
        const refused =
          addresses.length === 0 ||
          addresses.some((a) => {
            const ip = parseIp(a.address);
            return !ip || !list.allowsAddress(ip);
          });
        if (refused)
          return callback(
            Object.assign(new WebhookRefusedError(refusedAddressProblem(hostname)), { code: 'EPGDRAINREFUSED' }),
            options.all ? [] : '',
          );
        if (options.all)
          callback(
            null,
            addresses.map((a) => ({ address: a.address, family: a.family })),
          );
        else callback(null, addresses[0]!.address, addresses[0]!.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, options.all ? [] : ''),
    );
  };
  const module = target.url.protocol === 'https:' ? node.https : node.http;
  return new Promise<WebhookAnswer>((resolvePromise, reject) => {
    const req = module.request(
      {
        protocol: target.url.protocol,
        host: target.literal ? target.host : target.url.hostname,
        port: target.port,
        path: `${target.url.pathname}${target.url.search}`,
        method: request.method,
        headers: { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) },
        signal: request.signal,
        agent: false, // every delivery resolves and checks its own connection
        ...(target.literal ? {} : { lookup: lookup as never, servername: target.host }),
      },
      (res) => {
        // The status and headers are the answer; the body is never read. The socket is closed now,
        // so a receiver that streams a body forever holds nothing of this process.
        resolvePromise({ status: res.statusCode ?? 0, retryAfter: headerValue(res.headers['retry-after']) });
        res.destroy();
      },
    );
    req.on('error', (error: NodeJS.ErrnoException) => {
      const cause = (error as { cause?: unknown }).cause;
      reject(error instanceof WebhookRefusedError ? error : cause instanceof WebhookRefusedError ? cause : error);
    });
    req.end(request.body);
  });
}

function headerValue(value: string | string[] | undefined): string | null {
  return value === undefined ? null : Array.isArray(value) ? (value[0] ?? null) : value;
}
