// A TCP proxy on 127.0.0.1 in front of PostgreSQL that a test can misbehave through: drop every
// open connection (new ones still go through), or cut it off entirely.
import net from 'node:net';

export interface TcpProxy {
  /** `databaseUrl` with its host and port replaced by the proxy's. */
  urlFor(databaseUrl: string): string;
  /** Destroys every open connection; returns how many. */
  dropConnections(): number;
  /** Bytes clients have sent to the server through the proxy, and connections opened, so far:
   * whether anything was said to the database at all. */
  traffic(): { bytesToServer: number; connections: number };
  /** Stops accepting and drops everything. */
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let bytesToServer = 0;
  let connections = 0;
  const server = net.createServer((client) => {
    connections++;
    client.on('data', (chunk: Buffer) => (bytesToServer += chunk.length));
    const upstream = net.connect(target.port, target.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const dropConnections = () => {
    const n = sockets.size / 2;
    for (const s of sockets) s.destroy();
    return n;
  };
  return {
    urlFor: (databaseUrl) => {
      const url = new URL(databaseUrl);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    dropConnections,
    traffic: () => ({ bytesToServer, connections }),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        dropConnections();
      }),
  };
}
