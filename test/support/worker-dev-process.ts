// Runs `npm run dev:worker` (src/dev/worker-dev.ts → wrangler dev → workerd) as a real process group
// against a test database, on the Neon path or with --hyperdrive, the way the README says to.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PORT_TAKEN, startOnFreePort } from './port-retry.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface WorkerDevProcess {
  url: string;
  output(): string;
  stop(): Promise<void>;
  /** kill -9 of worker-dev, wrangler and workerd at once; the data directory is left as it was
   * (a dataDir given by the caller is never removed). */
  kill(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface WorkerDevOptions {
  databaseUrl: string;
  hyperdrive: boolean;
  env: Record<string, string>;
  dataDir?: string;
}

export function startWorkerDev(options: WorkerDevOptions): Promise<WorkerDevProcess> {
  return startOnFreePort(() => startOnce(options));
}

async function startOnce(options: WorkerDevOptions): Promise<WorkerDevProcess> {
  const port = await freePort();
  const dataDir = options.dataDir ?? (await mkdtemp(path.join(os.tmpdir(), 'pgdrain-worker-dev-')));
  const args = [path.join(ROOT, 'src/dev/worker-dev.ts'), ...(options.hyperdrive ? ['--hyperdrive'] : [])];
  const child: ChildProcess = spawn(process.execPath, args, {
    cwd: ROOT,
    // Its own process group: stop() ends worker-dev, wrangler and workerd together.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? dataDir,
      WRANGLER_SEND_METRICS: 'false',
      // wrangler's log files go to this instance's temporary folder, not the user's home.
      WRANGLER_LOG_PATH: path.join(dataDir, 'wrangler-logs'),
      DATABASE_URL: options.databaseUrl,
      PGDRAIN_DATA_DIR: dataDir,
      PORT: String(port),
      ...options.env,
    },
  });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig);
    } catch {
      // already gone
    }
  };
  const stop = async () => {
    signal('SIGTERM');
    const stopped = await Promise.race([
      exited.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), 10_000)),
    ]);
    if (!stopped) signal('SIGKILL');
    if (!options.dataDir) await rm(dataDir, { recursive: true, force: true });
  };
  const kill = async () => {
    signal('SIGKILL');
    await exited;
  };

  const url = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 200))) {
    if (child.exitCode !== null || out.includes(PORT_TAKEN)) {
      await stop();
      throw new Error(`dev:worker exited before serving:\n${out}`);
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`dev:worker did not serve /healthz within 60 s:\n${out}`);
    }
    const ok = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
  }
  return { url, output: () => out, stop, kill };
}
