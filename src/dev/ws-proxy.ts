// A WebSocket-to-TCP proxy so the Neon serverless driver (which speaks PostgreSQL over a
// WebSocket) can reach a plain local PostgreSQL: for `npm run dev:worker`, the Worker tests and
// the Worker benchmark. Node only, never deployed. It listens on 127.0.0.1 only and forwards only
// to the one database address it was given, so it cannot be used to reach anything else. It
// stands in for Neon's pooled endpoint (the connection string the README gives the Worker):
// - like Neon's proxy, it takes the client's password in cleartext and authenticates to PostgreSQL
//   itself (password-handshake.ts), so the driver connects as it does in production: start-up,
//   password and first query in one flight;
// - like Neon's PgBouncer, it keeps logged-in backends for the next client (per start-up message
//   and password), so a request does not meet a backend with cold caches. It pools by session,
//   not by transaction: a backend goes back once its client leaves, reset with DISCARD ALL, and
//   only if that client left it idle (never inside a transaction or mid-query).
import { createRequire } from 'node:module';
import http from 'node:http';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { ClientGreeting, ServerLogin } from './password-handshake.ts';

/** Logged-in backends kept per credentials for the next client. */
const MAX_IDLE_BACKENDS = 20;

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
  let closing = false;

  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const address = url.searchParams.get('address');
    if (url.pathname !== '/v1' || address !== allowed) {
      socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws));
  });

  /** A PostgreSQL connection the proxy logged in; `owner` gets what the server sends. */
  interface Backend {
    tcp: net.Socket;
    key: string;
    /** What the server said once logged in, replayed to each client that reuses the backend. */
    hello: Buffer;
    /** The last bytes the server sent: they end in ReadyForQuery when it is idle. */
    tail: Buffer;
    /** The client sent something the server has not answered with ReadyForQuery yet. */
    busy: boolean;
    owner: ((chunk: Buffer) => void) | null;
    onClose: (() => void) | null;
  }
  const readyAndIdle = (tail: Buffer) => tail.length >= 6 && tail[tail.length - 6] === 0x5a && tail[tail.length - 1] === 0x49;
  /** Logged-in backends no client holds, by start-up message and password (a client gets one only
   * with the credentials it was logged in with). */
  const idle = new Map<string, Backend[]>();

  function openBackend(onData: (chunk: Buffer) => void, onClose: () => void): { tcp: net.Socket; send(bytes: Buffer): void } {
    const tcp = net.connect(options.target.port, options.target.host);
    sockets.add(tcp);
    tcp.setNoDelay(true);
    const pending: Buffer[] = [];
    tcp.on('connect', () => {
      for (const chunk of pending.splice(0)) tcp.write(chunk);
    });
    tcp.on('data', onData);
    tcp.on('close', () => {
      sockets.delete(tcp);
      onClose();
    });
    tcp.on('error', () => tcp.destroy());
    return { tcp, send: (bytes) => (tcp.connecting ? pending.push(bytes) : tcp.write(bytes)) };
  }

  /** Back to the pool if the server is idle (its last message ReadyForQuery, not in a transaction),
   * after DISCARD ALL has reset the session; closed otherwise. */
  function release(backend: Backend): void {
    backend.owner = null;
    backend.onClose = null;
    if (backend.busy || !readyAndIdle(backend.tail) || backend.tcp.destroyed || closing) return void backend.tcp.destroy();
    backend.tail = Buffer.alloc(0);
    backend.owner = () => {
      if (readyAndIdle(backend.tail)) {
        backend.owner = null;
        const list = idle.get(backend.key) ?? [];
        if (list.length >= MAX_IDLE_BACKENDS) return void backend.tcp.destroy();
        list.push(backend);
        idle.set(backend.key, list);
      }
    };
    const query = Buffer.from('DISCARD ALL\0');
    const header = Buffer.alloc(5);
    header.write('Q', 0);
    header.writeInt32BE(query.length + 4, 1);
    backend.tcp.write(Buffer.concat([header, query]));
  }

  function takeIdle(key: string): Backend | undefined {
    const list = idle.get(key);
    let backend = list?.pop();
    while (backend && backend.tcp.destroyed) backend = list?.pop();
    return backend;
  }

  function serve(ws: import('ws').WebSocket): void {
    let backend: Backend | null = null;
    let send: ((bytes: Buffer) => void) | null = null;
    /** What the client sends after its password while its backend is logging in. */
    const early: Buffer[] = [];
    const toClient = (chunk: Buffer) =>
      later(() => {
        if (ws.readyState === ws.OPEN) ws.send(chunk);
      });
    const attach = (b: Backend) => {
      backend = b;
      send = (bytes) => {
        // Terminate ends the client's session, not the pooled backend's: kept from the server.
        const terminate = bytes.length >= 5 && bytes[bytes.length - 5] === 0x58 && bytes.readInt32BE(bytes.length - 4) === 4;
        const sent = terminate ? bytes.subarray(0, bytes.length - 5) : bytes;
        if (sent.length > 0) {
          b.busy = true;
          b.tcp.write(sent);
        }
        // The server would close the connection: the proxy does, for it.
        if (terminate) ws.close();
      };
      b.owner = toClient;
      b.onClose = () => {
        if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close();
      };
      // A client that left while its backend was logging in: the backend goes back to the pool.
      if (ws.readyState !== ws.OPEN) return closed();
    };
    const passOn = (rest: Buffer) => {
      for (const bytes of [rest, ...early.splice(0)]) if (bytes.length > 0) send?.(bytes);
    };
    const greeting = new ClientGreeting({
      toClient,
      fail: () => ws.close(),
      onCancel: (request) => {
        const { tcp, send: sendCancel } = openBackend(() => {}, () => {});
        sendCancel(request);
        tcp.end();
      },
      onGreeting: (g) => {
        const key = createHash('sha256').update(g.startup).update('\0').update(g.password).digest('hex');
        const reused = takeIdle(key);
        if (reused) {
          toClient(reused.hello);
          attach(reused);
          return passOn(g.rest);
        }
        let login: ServerLogin | undefined;
        const opened = openBackend(
          (chunk) => {
            if (login && !login.finished) return login.read(chunk);
            b.tail = Buffer.concat([b.tail, chunk]).subarray(-6);
            if (b.tail.length === 6 && b.tail[0] === 0x5a) b.busy = false;
            b.owner?.(chunk);
          },
          () => b.onClose?.(),
        );
        const b: Backend = { tcp: opened.tcp, key, hello: Buffer.alloc(0), tail: Buffer.alloc(0), busy: false, owner: null, onClose: () => ws.close() };
        login = new ServerLogin(g, {
          toServer: opened.send,
          toClient,
          fail: () => {
            opened.tcp.destroy();
            ws.close();
          },
          onLoggedIn: (hello, rest) => {
            b.hello = hello;
            b.tail = Buffer.concat([hello, rest]).subarray(-6);
            toClient(Buffer.concat([hello, rest]));
            attach(b);
            passOn(g.rest);
          },
        });
      },
    });
    ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
      const chunk = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      later(() => (send ? send(chunk) : greeting.finished ? early.push(chunk) : greeting.read(chunk)));
    });
    const closed = () => {
      const b = backend;
      backend = null;
      send = null;
      if (b) release(b);
    };
    ws.on('close', closed);
    ws.on('error', () => ws.terminate());
  }

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
      closing = true;
      for (const s of sockets) s.destroy();
      for (const client of wss.clients) client.terminate();
      wss.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
