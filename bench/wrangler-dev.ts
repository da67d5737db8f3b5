// `wrangler dev --test-scheduled` for the benchmark's Worker rows: started from this repo's config
// (or another), with settings and secrets in an env file only its owner can read, its Durable
// Objects' state (the queue's clock) in a folder of its own, and a way to run `scheduled()`.
import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../src/db/embedded.ts';
import { wranglerDevArgs } from '../src/dev/wrangler-dev-args.ts';
import { PORT_TAKEN, startOnFreePort } from '../test/support/port-retry.ts';

export const BENCH_TOKEN = 'bench-token-0123456789';
const root = fileURLToPath(new URL('..', import.meta.url));

export interface WranglerDev {
  port: number;
  process: ChildProcess;
  /** Everything wrangler and the Worker printed so far. */
  output(): string;
  /** Runs `scheduled()` once and returns the report it logged (`"event":"scheduled"`). */
  cron(): Promise<Record<string, unknown>>;
  post(pathname: string, body: unknown): Promise<Response>;
  stop(): Promise<void>;
}

export async function startWranglerDev(options: {
  /** Lines of the env file (NAME=value): the database, the API token is added. */
  vars: Record<string, string>;
  /** Another wrangler config than wrangler.toml, relative to the repo. */
  config?: string;
  env?: Record<string, string>;
}): Promise<WranglerDev> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-bench-wrangler-'));
  await chmod(dir, 0o700);
  const envFile = path.join(dir, 'worker.env');
  const vars = { API_TOKEN: BENCH_TOKEN, ...options.vars };
  await writeFile(
    envFile,
    `${Object.entries(vars)
      .map(([k, v]) => `${k}=${v}`)
      .join('\n')}\n`,
    { mode: 0o600 },
  );
  try {
    return await startOnFreePort(() => startOnce(envFile, dir, options));
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

async function startOnce(
  envFile: string,
  dir: string,
  options: { config?: string; env?: Record<string, string> },
): Promise<WranglerDev> {
  const port = await freePort();
  const args = wranglerDevArgs({ port, envFile, stateDir: path.join(dir, 'state'), config: options.config });
  const wrangler = spawn(path.join(root, 'node_modules/.bin/wrangler'), args, {
    cwd: root,
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  wrangler.stdout!.on('data', (c) => (out += c));
  wrangler.stderr!.on('data', (c) => (out += c));
  const end = async () => {
    if (wrangler.exitCode === null) {
      wrangler.kill('SIGTERM');
      await new Promise((r) => wrangler.once('exit', r));
    }
  };
  const stop = async () => {
    await end();
    await rm(dir, { recursive: true, force: true });
  };
  for (let waited = 0; !out.includes('Ready on'); waited += 100) {
    if (waited > 30_000 || wrangler.exitCode !== null || out.includes(PORT_TAKEN)) {
      // The folder stays for the next attempt (startWranglerDev removes it when none starts).
      await end();
      throw new Error(`wrangler dev did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const cron = async () => {
    const before = out.length;
    const res = await fetch(`http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*`);
    if (!res.ok) throw new Error(`/__scheduled answered ${res.status}`);
    for (let waited = 0; waited < 5_000; waited += 20) {
      const line = out
        .slice(before)
        .split('\n')
        .find((l) => l.includes('"event":"scheduled"'));
      if (line) return JSON.parse(line.slice(line.indexOf('{'))) as Record<string, unknown>;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`no scheduled report in wrangler's output:\n${out.slice(before)}`);
  };
  const post = (pathname: string, body: unknown) =>
    fetch(`http://127.0.0.1:${port}${pathname}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BENCH_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  return { port, process: wrangler, output: () => out, cron, post, stop };
}

/** A webhook receiver on 127.0.0.1 that records when each `{ seq }` body first arrived (`now()`). */
export async function startHookServer(
  now: () => number,
): Promise<{ url: string; port: number; arrivals: Map<number, number>; close(): Promise<void> }> {
  const arrivals = new Map<number, number>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const seq = (JSON.parse(body || '{}') as { seq?: number }).seq;
      if (typeof seq === 'number' && !arrivals.has(seq)) arrivals.set(seq, now());
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    arrivals,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
