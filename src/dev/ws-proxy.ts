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
import { ClientGreeting, type Greeting, ServerLogin } from './password-handshake.ts';

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
  const server = http.createServer((_, res) =>
    res.writeHead(426, { 'content-type': 'text/plain' }).end('WebSocket only\n'),
  );
  const wss = new WebSocketServer({ noServer: true });
  const backends = new Backends(options.target);

  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const address = url.searchParams.get('address');
    if (url.pathname !== '/v1' || address !== allowed) {
      socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => new ClientSession(ws, backends, later));
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
    dropConnections: () => backends.dropAll(),
    close: async () => {
      backends.close();
      for (const client of wss.clients) client.terminate();
      wss.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

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

const readyAndIdle = (tail: Buffer) =>
  tail.length >= 6 && tail[tail.length - 6] === 0x5a && tail[tail.length - 1] === 0x49;

/** The connections to PostgreSQL: every open socket, and the logged-in backends no client holds, by
 * start-up message and password (a client gets one only with the credentials it was logged in with). */
class Backends {
  readonly #target: { host: string; port: number };
  readonly #sockets = new Set<net.Socket>();
  readonly #idle = new Map<string, Backend[]>();
  #closing = false;

  constructor(target: { host: string; port: number }) {
    this.#target = target;
  }

  open(onData: (chunk: Buffer) => void, onClose: () => void): { tcp: net.Socket; send(bytes: Buffer): void } {
    const tcp = net.connect(this.#target.port, this.#target.host);
    this.#sockets.add(tcp);
    tcp.setNoDelay(true);
    const pending: Buffer[] = [];
    tcp.on('connect', () => {
      for (const chunk of pending.splice(0)) tcp.write(chunk);
    });
    tcp.on('data', onData);
    tcp.on('close', () => {
      this.#sockets.delete(tcp);
      onClose();
    });
    tcp.on('error', () => tcp.destroy());
    return { tcp, send: (bytes) => (tcp.connecting ? pending.push(bytes) : tcp.write(bytes)) };
  }

  takeIdle(key: string): Backend | undefined {
    const list = this.#idle.get(key);
    let backend = list?.pop();
    while (backend?.tcp.destroyed) backend = list?.pop();
    return backend;
  }

  /** Back to the pool if the server is idle (its last message ReadyForQuery, not in a transaction),
   * after DISCARD ALL has reset the session; closed otherwise. */
  giveBack(backend: Backend): void {
    backend.owner = null;
    backend.onClose = null;
    if (backend.busy || !readyAndIdle(backend.tail) || backend.tcp.destroyed || this.#closing)
      return void backend.tcp.destroy();
    backend.tail = Buffer.alloc(0);
    backend.owner = () => {
      if (!readyAndIdle(backend.tail)) return;
      backend.owner = null;
      const list = this.#idle.get(backend.key) ?? [];
      if (list.length >= MAX_IDLE_BACKENDS) return void backend.tcp.destroy();
      list.push(backend);
      this.#idle.set(backend.key, list);
    };
    const query = Buffer.from('DISCARD ALL\0');
    const header = Buffer.alloc(5);
    header.write('Q', 0);
    header.writeInt32BE(query.length + 4, 1);
    backend.tcp.write(Buffer.concat([header, query]));
  }

  /** Cuts every open connection; returns how many. */
  dropAll(): number {
    const n = this.#sockets.size;
    for (const s of this.#sockets) s.destroy();
    return n;
  }

  close(): void {
    this.#closing = true;
    this.dropAll();
  }
}

/** One client's WebSocket: its greeting read, then a backend (reused, or logged in for it) that
 * carries its messages both ways until it leaves. */
class ClientSession {
  readonly #ws: import('ws').WebSocket;
  readonly #backends: Backends;
  readonly #later: (send: () => void) => void;
  readonly #greeting: ClientGreeting;
  #backend: Backend | null = null;
  #send: ((bytes: Buffer) => void) | null = null;
  /** What the client sends after its password while its backend is logging in. */
  readonly #early: Buffer[] = [];

  constructor(ws: import('ws').WebSocket, backends: Backends, later: (send: () => void) => void) {
    this.#ws = ws;
    this.#backends = backends;
    this.#later = later;
    this.#greeting = new ClientGreeting({
      toClient: this.#toClient,
      fail: () => ws.close(),
      onCancel: (request) => {
        const { tcp, send } = backends.open(
          () => {},
          () => {},
        );
        send(request);
        tcp.end();
      },
      onGreeting: (g) => this.#greeted(g),
    });
    ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
      const chunk = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      later(() =>
        this.#send ? this.#send(chunk) : this.#greeting.finished ? this.#early.push(chunk) : this.#greeting.read(chunk),
      );
    });
    ws.on('close', () => this.#closed());
    ws.on('error', () => ws.terminate());
  }

  readonly #toClient = (chunk: Buffer) =>
    this.#later(() => {
      if (this.#ws.readyState === this.#ws.OPEN) this.#ws.send(chunk);
    });

  /** Its greeting read: a backend logged in with the same credentials, or a new one. */
  #greeted(g: Greeting): void {
    const key = createHash('sha256').update(g.startup).update('\0').update(g.password).digest('hex');
    const reused = this.#backends.takeIdle(key);
    if (reused) {
      this.#toClient(reused.hello);
      this.#attach(reused);
      this.#passOn(g.rest);
      return;
    }
    let login: ServerLogin | undefined;
    const opened = this.#backends.open(
      (chunk) => {
        if (login && !login.finished) return login.read(chunk);
        b.tail = Buffer.concat([b.tail, chunk]).subarray(-6);
        if (b.tail.length === 6 && b.tail[0] === 0x5a) b.busy = false;
        b.owner?.(chunk);
      },
      () => b.onClose?.(),
    );
    const b: Backend = {
      tcp: opened.tcp,
      key,
      hello: Buffer.alloc(0),
      tail: Buffer.alloc(0),
      busy: false,
      owner: null,
      onClose: () => this.#ws.close(),
    };
    login = new ServerLogin(g, {
      toServer: opened.send,
      toClient: this.#toClient,
      fail: () => {
        opened.tcp.destroy();
        this.#ws.close();
      },
      onLoggedIn: (hello, rest) => {
        b.hello = hello;
        b.tail = Buffer.concat([hello, rest]).subarray(-6);
        this.#toClient(Buffer.concat([hello, rest]));
        this.#attach(b);
        this.#passOn(g.rest);
      },
    });
  }

  #attach(b: Backend): void {
    const ws = this.#ws;
    this.#backend = b;
    this.#send = (bytes) => {
      // Terminate ends the client's session, not the pooled backend's: kept from the server.
      const terminate =
        bytes.length >= 5 && bytes[bytes.length - 5] === 0x58 && bytes.readInt32BE(bytes.length - 4) === 4;
      const sent = terminate ? bytes.subarray(0, bytes.length - 5) : bytes;
      if (sent.length > 0) {
        b.busy = true;
        b.tcp.write(sent);
      }
      // The server would close the connection: the proxy does, for it.
      if (terminate) ws.close();
    };
    b.owner = this.#toClient;
    b.onClose = () => {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close();
    };
    // A client that left while its backend was logging in: the backend goes back to the pool.
    if (ws.readyState !== ws.OPEN) this.#closed();
  }

  #passOn(rest: Buffer): void {
    for (const bytes of [rest, ...this.#early.splice(0)]) if (bytes.length > 0) this.#send?.(bytes);
  }

  #closed(): void {
    const b = this.#backend;
    this.#backend = null;
    this.#send = null;
    if (b) this.#backends.giveBack(b);
  }
}
