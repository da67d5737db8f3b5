// A stock PostgreSQL: Debian's `postgresql` package (15 on Debian 12, LLVM JIT on by default), started
// with its default settings in a temporary folder on a free port — the server most users run, which
// the embedded builds (no JIT, mostly 18) cannot stand in for. Used by .ci/stock-postgres.ts and by
// `npm run bench -- --server stock`. Only pg_stat_statements is preloaded (it changes no plan), so a
// check can read which statements were JIT-compiled.
//
// Install the server with `apt-get install -y postgresql` (.ci/run does). It refuses to run as root:
// as root it runs as the package's `postgres` user.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface StockServer {
  /** Superuser URL on 127.0.0.1 (trust authentication on loopback, password ignored). */
  url: string;
  port: number;
  /** The postmaster's process id (the bench reads its CPU). */
  pid: number;
  version: string;
  stop(): Promise<void>;
}

/** The newest Debian PostgreSQL's bin folder (/usr/lib/postgresql/N/bin), or null when none is installed. */
export function findStockBinaries(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const majors = readdirSync(root)
    .filter((d) => /^\d+$/.test(d) && existsSync(path.join(root, d, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return majors[0] ? path.join(root, majors[0], 'bin') : null;
}

/** Starts Debian's PostgreSQL with its defaults (plus `settings`, which tests should leave empty). */
export async function startStockPostgres(settings: Record<string, string | number> = {}): Promise<StockServer> {
  const bin = findStockBinaries();
  if (!bin)
    throw new Error(
      "Debian's PostgreSQL is not installed: apt-get install -y postgresql (no /usr/lib/postgresql/N/bin/postgres)",
    );
  const asRoot = process.getuid?.() === 0;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-stock-'));
  await chmod(dir, 0o755);
  const data = path.join(dir, 'data');
  if (asRoot) {
    const id = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
    if (id.status !== 0) throw new Error("running as root needs the package's `postgres` user, which is missing");
    await chown(dir, Number(id.stdout), Number(gid.stdout));
  }
  const run = (cmd: string, args: string[]) =>
    asRoot ? { cmd: 'runuser', args: ['-u', 'postgres', '--', cmd, ...args] } : { cmd, args };
  const init = run(path.join(bin, 'initdb'), [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth=trust',
    '--encoding=UTF8',
    '--no-instructions',
  ]);
  const initdb = spawnSync(init.cmd, init.args, { encoding: 'utf8' });
  if (initdb.status !== 0) throw new Error(`initdb failed: ${initdb.stderr || initdb.stdout}`);
  const port = await freePort();
  const all: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    port,
    unix_socket_directories: dir,
    shared_preload_libraries: 'pg_stat_statements',
    // Enough for the test run's parallel files; every other setting is the package's default.
    max_connections: 300,
    ...settings,
  };
  const start = run(path.join(bin, 'postgres'), [
    '-D',
    data,
    ...Object.entries(all).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
  ]);
  const child = spawn(start.cmd, start.args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitForPort(port, exited, () => log);
  // runuser forks: the postmaster's pid is the first line of postmaster.pid.
  const pidFile = spawnSync('head', ['-1', path.join(data, 'postmaster.pid')], { encoding: 'utf8' });
  const pid = Number(pidFile.stdout.trim()) || child.pid!;
  const version = spawnSync(path.join(bin, 'postgres'), ['--version'], { encoding: 'utf8' }).stdout.trim();
  const stop = async () => {
    try {
      process.kill(pid, 'SIGINT'); // fast shutdown
    } catch {
      // already gone
    }
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    await rm(dir, { recursive: true, force: true });
  };
  process.once('exit', () => {
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      // already stopped
    }
  });
  return { url: `postgres://postgres:stock@127.0.0.1:${port}/postgres`, port, pid, version, stop };
}

async function waitForPort(port: number, exited: Promise<void>, log: () => string): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (gone) throw new Error(`PostgreSQL exited while starting: ${log()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.end();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (open) {
      // Accepting connections is not the same as ready: wait for "ready to accept".
      if (/ready to accept connections/.test(log())) return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`PostgreSQL did not start within 30 s: ${log()}`);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
