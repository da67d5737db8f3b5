// A real PgBouncer (Debian's package: /usr/sbin/pgbouncer, or PGBOUNCER_PATH) in front of a test
// server, in transaction mode with its default settings otherwise: what most hosted PostgreSQL is
// reached through. Every database of the server is reachable through it (a `*` entry), under the
// same user and password. As root it runs as the `postgres` user (PgBouncer refuses root).
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export const PGBOUNCER_PATH = process.env.PGBOUNCER_PATH ?? '/usr/sbin/pgbouncer';

/** True when this machine has PgBouncer (CI installs Debian's). */
export const havePgBouncer = (): boolean => existsSync(PGBOUNCER_PATH);

export interface PgBouncer {
  /** `url` (a direct URL of the server behind it) with its host and port made the pooler's. */
  through(url: string): string;
  port: number;
  /** The pooler's log, for a test's diagnosis. */
  log(): Promise<string>;
  stop(): Promise<void>;
}

/** `serverUrl`: any URL of the server (its host, port, user and password are used). */
export async function startPgBouncer(
  serverUrl: string,
  { poolMode = 'transaction' }: { poolMode?: 'transaction' | 'session' } = {},
): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-pgbouncer-'));
  await chmod(dir, 0o755);
  const port = await freePort();
  const file = (name: string) => path.join(dir, name);
  const quote = (text: string) => `"${text.replaceAll('"', '""')}"`;
  await writeFile(file('userlist.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o600 });
  await writeFile(
    file('pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = scram-sha-256',
      `auth_file = ${file('userlist.txt')}`,
      `pool_mode = ${poolMode}`,
      // The tests open many pools at once; the server behind it allows 300.
      'max_client_conn = 1000',
      `logfile = ${file('pgbouncer.log')}`,
      `pidfile = ${file('pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { uid, gid } = postgresUser();
    for (const name of ['', 'userlist.txt', 'pgbouncer.ini']) await chown(file(name), uid, gid);
  }
  const child: ChildProcess = spawn(PGBOUNCER_PATH, [...(asRoot ? ['-u', 'postgres'] : []), file('pgbouncer.ini')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const log = () => readFile(file('pgbouncer.log'), 'utf8').catch(() => output);
  const through = (url: string) => {
    const direct = new URL(url);
    direct.hostname = '127.0.0.1';
    direct.port = String(port);
    return direct.toString();
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGINT'); // PgBouncer's immediate shutdown
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    await rm(dir, { recursive: true, force: true });
  };
  // Up when it answers a query through to the server.
  const deadline = Date.now() + 15_000;
  for (;;) {
    const client = new pg.Client({ connectionString: through(serverUrl), connectionTimeoutMillis: 1_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      break;
    } catch (error) {
      await client.end().catch(() => {});
      if (child.exitCode !== null || Date.now() > deadline) {
        const text = await log();
        await stop();
        throw new Error(`PgBouncer did not start: ${(error as Error).message}\n${text}\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return { through, port, log, stop };
}

/** The `postgres` system user (the embedded server's package creates it at its first start as root). */
export function postgresUser(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
