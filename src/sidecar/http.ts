// The sidecar's HTTP server: the Hono app on a port, with limits on what one client can hold.
// Stopping it stops accepting connections, closes idle keep-alive ones, lets requests in flight
// finish for a moment, then closes the rest.
import type { AddressInfo, Socket } from 'node:net';
import { serve } from '@hono/node-server';
import type { Hono } from 'hono';

/** Requests still in flight at stop get this long before their connections are closed. */
const IN_FLIGHT_GRACE_MS = 1_000;

export interface HttpServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

type NodeServer = ReturnType<typeof serve> & { closeIdleConnections?: () => void; closeAllConnections?: () => void };

/** What a client may take of the server: a slow client (a byte every few seconds) cannot hold a
 * connection past the headers or request timeout, and connections beyond the cap make room or are
 * refused (capConnections). */
export interface ServerLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  maxConnections: number;
}

export async function serveHttp(app: Hono<any>, host: string, port: number, limits: ServerLimits): Promise<HttpServer> {
  const serverOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    // Node enforces both timeouts when it checks its connections: every 30 s unless told otherwise.
    connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs),
  };
  const server = serve({ fetch: app.fetch, port, hostname: host, serverOptions }) as NodeServer;
  capConnections(server, limits.maxConnections);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
  } catch (error) {
    server.close();
    const code = (error as { code?: string }).code;
    throw new Error(
      code === 'EADDRINUSE'
        ? `${host}:${port} is already in use: stop what listens there, or set PORT (0 picks a free one)`
        : `cannot listen on ${host}:${port}: ${(error as Error).message}`,
    );
  }
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${bound}`,
    port: bound,
    stop: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections?.();
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([closed, new Promise((resolve) => (timer = setTimeout(resolve, IN_FLIGHT_GRACE_MS)))]);
      clearTimeout(timer);
      server.closeAllConnections?.();
      await closed;
    },
  };
}

/**
 * At most `max` connections. A connection beyond the cap closes the one that has been idle longest
 * — no request under way: opened and never used, or a keep-alive connection between requests —, so
 * no request is lost and idle clients, however many, cannot shut a health probe or an enqueue out;
 * when every connection has a request under way (long-polls, slow uploads), the new one is closed.
 */
function capConnections(server: NodeServer, max: number): void {
  // In the order they opened; for each, its requests under way and when it last became idle.
  const open = new Map<Socket, { busy: number; idleSince: number }>();
  server.on('connection', (socket: Socket) => {
    if (open.size >= max) {
      let idle: Socket | undefined;
      let since = Number.POSITIVE_INFINITY;
      for (const [s, state] of open) {
        if (state.busy === 0 && state.idleSince < since) {
          idle = s;
          since = state.idleSince;
        }
      }
      if (!idle) {
        socket.destroy();
        return;
      }
      open.delete(idle);
      idle.destroy();
    }
    open.set(socket, { busy: 0, idleSince: performance.now() });
    socket.once('close', () => open.delete(socket));
  });
  // From a request's headers to its response's end, the connection is in use.
  server.on('request', (request: { socket: Socket }, response: { once(event: 'close', fn: () => void): void }) => {
    const state = open.get(request.socket);
    if (!state) return;
    state.busy++;
    response.once('close', () => {
      state.busy--;
      state.idleSince = performance.now();
    });
  });
}
