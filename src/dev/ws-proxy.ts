// A WebSocket-to-TCP proxy so the Neon serverless driver (which speaks PostgreSQL over a
// WebSocket) can reach a plain local PostgreSQL: for `npm run dev:worker`, the Worker tests and
// the Worker benchmark. Node only, never deployed. It listens on 127.0.0.1 only and forwards only
// to the one database address it was given, so it cannot be used to reach anything else. Like
// Neon's proxy, it takes the client's password in cleartext and authenticates to PostgreSQL
// itself (password-handshake.ts), so the driver connects as it does in production: start-up,
// password and first query in one flight.
import { createRequire } from 'node:module';
import http from 'node:http';
import net from 'node:net';
import { PasswordHandshake } from './password-handshake.ts';

// Loaded through Node's own resolver: under the Workers test project, Vite resolves 'ws' with
// browser conditions to a stub that has no server.
const { WebSocketServer } = createRequire(import.meta.url)('ws') as typeof import('ws');

export interface WsProxy {
  /** host:port to give the Neon driver (neonConfig.wsProxy). */
  address: string;
  port: number;
  /** Changes the one-way delay for everything sent from now on. */
  setDelayMs(ms: number): void;
  /** Cuts every open connection (the chaos tests' dropped network); new ones are still accepted.
   * Returns how many were cut. */
  dropConnections(): number;
  close(): Promise<void>;
}

export async function startWsProxy(options: {
  target: { host: string; port: number };
  port?: number;
  /** One-way delay added to every chunk in each direction (a round trip gains twice this), to run
   * the Worker at a realistic distance from its database: Workers to Neon is 5-30 ms a round trip. */
  delayMs?: number;
}): Promise<WsProxy> {
  let delayMs = options.delayMs ?? 0;
  // Equal delays keep order: timers of the same duration fire first in, first out.
  const later = (send: () => void) => (delayMs > 0 ? void setTimeout(send, delayMs) : send());
  const allowed = `${options.target.host}:${options.target.port}`;
  const server = http.createServer((_, res) => res.writeHead(426, { 'content-type': 'text/plain' }).end('WebSocket only\n'));
  const wss = new WebSocketServer({ noServer: true });
  const sockets = new Set<net.Socket>();

  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const address = url.searchParams.get('address');
    if (url.pathname !== '/v1' || address !== allowed) {
      socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const tcp = net.connect(options.target.port, options.target.host);
      sockets.add(tcp);
      tcp.setNoDelay(true);
      const pending: Buffer[] = [];
      let connected = false;
      tcp.on('connect', () => {
        connected = true;
        for (const chunk of pending.splice(0)) tcp.write(chunk);
      });
      const toServer = (chunk: Buffer) => (connected ? tcp.write(chunk) : pending.push(chunk));
      // The delay is the Worker's distance from the database, so it is added between the client and
      // the proxy; the proxy authenticates to PostgreSQL right next to it, as Neon's does.
      const toClient = (chunk: Buffer) =>
        later(() => {
          if (ws.readyState === ws.OPEN) ws.send(chunk);
        });
      const handshake = new PasswordHandshake(toClient, toServer, () => closeBoth());
      ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
        const chunk = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
        later(() => (handshake.done ? toServer(chunk) : handshake.fromClient(chunk)));
      });
      tcp.on('data', (chunk) => (handshake.done ? toClient(chunk) : handshake.fromServer(chunk)));
      const closeBoth = () => {
        sockets.delete(tcp);
        tcp.destroy();
        if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close();
      };
      tcp.on('close', closeBoth);
      tcp.on('error', closeBoth);
      ws.on('close', closeBoth);
      ws.on('error', closeBoth);
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', resolve);
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    setDelayMs: (ms) => {
      delayMs = ms;
    },
    dropConnections: () => {
      const n = sockets.size;
      for (const s of sockets) s.destroy();
      return n;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      for (const client of wss.clients) client.terminate();
      wss.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
