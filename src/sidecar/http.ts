// The sidecar's HTTP server: the Hono app on a port, with limits on what one client can hold.
// Stopping it stops accepting connections, closes idle keep-alive ones, lets requests in flight
// finish for a moment, then closes the rest.
import type { AddressInfo } from 'node:net';
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
 * connection past the headers or request timeout, and connections beyond the cap are refused. */
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
  server.maxConnections = limits.maxConnections;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
  } catch (error) {
    server.close();
    const code = (error as { code?: string }).code;
    throw new Error(code === 'EADDRINUSE' ? `${host}:${port} is already in use: stop what listens there, or set PORT (0 picks a free one)` : `cannot listen on ${host}:${port}: ${(error as Error).message}`);
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
