// A Worker of the tests' own (a fixture's wrangler.toml) under `wrangler dev --test-scheduled`, in a
// process group of its own so stop() ends wrangler and workerd together. Its settings and secrets
// go in an env file only the owner can read, never on the command line.
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/db/embedded.ts';
import { PORT_TAKEN, startOnFreePort } from './port-retry.ts';
import { wranglerDevArgs } from '../../src/dev/wrangler-dev-args.ts';
import { startWsProxy } from '../../src/dev/ws-proxy.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface FixtureWorker {
  url: string;
  /** Runs scheduled() once; resolves when it has returned. */
  scheduled(): Promise<void>;
  output(): string;
  /** Stops wrangler and workerd, and the WebSocket proxy it was given. */
  stop(): Promise<void>;
}

/** The fixture Worker on the Neon path: the database at `databaseUrl` through a local WebSocket
 * proxy of its own (DATABASE_URL and NEON_WS_PROXY set), closed with it. */
export async function startFixtureWorkerOnNeon(options: {
  config: string;
  databaseUrl: string;
  env: Record<string, string>;
  dir: string;
}): Promise<FixtureWorker> {
  const target = new URL(options.databaseUrl);
  const ws = await startWsProxy({ target: { host: target.hostname, port: Number(target.port) } });
  try {
    const worker = await startFixtureWorker({
      config: options.config,
      dir: options.dir,
      env: { DATABASE_URL: options.databaseUrl, NEON_WS_PROXY: ws.address, ...options.env },
    });
    return { ...worker, stop: () => worker.stop().finally(() => ws.close()) };
  } catch (error) {
    await ws.close();
    throw error;
  }
}

export async function startFixtureWorker(options: {
  config: string;
  env: Record<string, string>;
  dir: string;
}): Promise<FixtureWorker> {
  const envFile = path.join(options.dir, `worker-${Date.now()}.env`);
  await writeFile(
    envFile,
    Object.entries(options.env)
      .map(([k, v]) => `${k}=${v}`)
      .join('\n'),
    { mode: 0o600 },
  );
  return startOnFreePort(() => startOnce(options.config, options.dir, envFile));
}

async function startOnce(config: string, dir: string, envFile: string): Promise<FixtureWorker> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    path.join(ROOT, 'node_modules/.bin/wrangler'),
    // Its local state in the run's own folder: a run never starts from what an earlier one left.
    wranglerDevArgs({ port, envFile, stateDir: path.join(dir, 'wrangler-state'), config }),
    {
      cwd: ROOT,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  let out = '';
  child.stdout!.on('data', (c) => (out += c));
  child.stderr!.on('data', (c) => (out += c));
  const stop = async () => {
    if (child.pid && child.exitCode === null) {
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        // gone
      }
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    }
  };
  for (let waited = 0; !out.includes('Ready on'); waited += 100) {
    if (waited > 30_000 || child.exitCode !== null || out.includes(PORT_TAKEN)) {
      await stop();
      throw new Error(`wrangler dev did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    scheduled: async () => void (await (await fetch(`${url}/__scheduled?cron=*+*+*+*+*`)).text()),
    output: () => out,
    stop,
  };
}
