// A start-up that fails half way leaves nothing running: a port already in use, a migration that
// fails, a bad setting or jobs module. In-process, startSidecar() rejects with a clear message and
// leaves no timer, pool, listener or server behind; as a process, `pgdrain start` exits non-zero
// with that message, and an embedded PostgreSQL it started is stopped.
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSidecar } from '../src/sidecar/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

const CLI = fileURLToPath(new URL('../src/entry/cli.ts', import.meta.url));
const silent = { level: 'silent' } as const;

let t: TestDatabase;
let busy: net.Server;
let busyPort: number;
beforeAll(async () => {
  t = await createTestDatabase();
  busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  busyPort = (busy.address() as net.AddressInfo).port;
});
afterAll(async () => {
  await new Promise((resolve) => busy.close(resolve));
  await t?.close();
});

/** Connections to the test database from anything of pgdrain's (pools, listener), counted on a
 * connection of its own that is closed again (no pool of the test's own keeps timers or sockets). */
async function pgdrainConnections(): Promise<{ n: number }[]> {
  const client = new pg.Client({ connectionString: t.url });
  await client.connect();
  try {
    return (
      await client.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'pgdrain%'`,
      )
    ).rows;
  } finally {
    await client.end();
  }
}

/** What keeps the event loop alive, counted by kind: timers, sockets, servers. */
function activeResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
  return counts;
}

/** Nothing of any kind is alive now that was not alive before (some of the test runner's may have ended). */
function expectNothingLeftBehind(before: Record<string, number>): void {
  const after = activeResources();
  const added = Object.entries(after).filter(([kind, n]) => n > (before[kind] ?? 0));
  expect(Object.fromEntries(added)).toEqual({});
}

/** `pgdrain start` as a user runs it; resolves with its exit code and output. */
function runCli(env: Record<string, string>, args: string[] = []): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, 'start', ...args], {
      env: {
        PATH: process.env.PATH ?? '',
        NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS ?? '',
        LOG_FORMAT: 'json',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d));
    child.stderr.on('data', (d: Buffer) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('startSidecar() in-process', () => {
  it('with its port in use: rejects saying so, and leaves no timer, pool, listener or server behind', async () => {
    const before = activeResources();
    await expect(
      startSidecar({
        databaseUrl: t.url,
        apiToken: 'startup-test-token-0123456789',
        port: busyPort,
        logger: (await import('pino')).default(silent),
      }),
    ).rejects.toThrow(`127.0.0.1:${busyPort} is already in use`);
    // Pools end their clients asynchronously; give the server a moment to see them go.
    for (let i = 0; i < 50 && (await pgdrainConnections())[0]!.n > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await pgdrainConnections()).toEqual([{ n: 0 }]);
    expectNothingLeftBehind(before);
  });

  it('with a migration that fails: rejects naming it, without the password, and nothing keeps running', async () => {
    const broken = await createTestDatabase({ migrate: false });
    try {
      // A `pgdrain` schema that is not pgdrain's: the first migration cannot create its table.
      await broken.query('CREATE SCHEMA pgdrain; CREATE TABLE pgdrain.jobs (x int)');
      const before = activeResources();
      const failure = startSidecar({
        databaseUrl: broken.url,
        apiToken: 'startup-test-token-0123456789',
        port: 0,
        logger: (await import('pino')).default(silent),
      });
      await expect(failure).rejects.toThrow(
        /^migrations failed on postgres:\/\/postgres:\*\*\*@.*: relation "jobs" already exists \(in the migration statement "CREATE TABLE \\"pgdrain\\"\.\\"jobs\\" \("\)$/,
      );
      await expect(failure).rejects.not.toThrow(/:[^/*]+@/); // no password in the message
      expectNothingLeftBehind(before);
    } finally {
      await broken.close();
    }
  });
});

describe('pgdrain start as a process', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-startup-'));
    await chmod(dir, 0o755);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('on an embedded PostgreSQL with its port in use: exits 1 saying so, and the PostgreSQL it started is stopped', async () => {
    const dataDir = path.join(dir, 'data');
    const result = await runCli({ PGDRAIN_DATA_DIR: dataDir, PORT: String(busyPort) });
    expect(result.code).toBe(1);
    expect(result.output).toContain(`pgdrain: could not start: 127.0.0.1:${busyPort} is already in use`);
    expect(result.output).toContain('embedded PostgreSQL started');
    // The server's own pid file goes when it stops; if it is left, its process must be gone.
    const pidFile = await readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').catch(() => null);
    if (pidFile !== null) expect(isAlive(Number(pidFile.split('\n')[0]))).toBe(false);
  });

  it('with a setting out of range: exits 1 naming the variable and its bound, and connects to nothing', async () => {
    const result = await runCli({
      DATABASE_URL: t.url,
      API_TOKEN: 'startup-test-token-0123456789',
      PORT: '0',
      BATCH_SIZE: '5000',
    });
    expect(result.code).toBe(1);
    expect(result.output).toContain('pgdrain: could not start: invalid settings: BATCH_SIZE: must be at most 1000');
    expect(await pgdrainConnections()).toEqual([{ n: 0 }]);
  });

  it('with a jobs module that throws on import: exits 1 naming it, and connects to nothing', async () => {
    const module = path.join(dir, 'bad-jobs.mjs');
    await writeFile(module, "throw new Error('the jobs module is broken');\n");
    const result = await runCli({ DATABASE_URL: t.url, API_TOKEN: 'startup-test-token-0123456789', PORT: '0' }, [
      '--jobs',
      module,
    ]);
    expect(result.code).toBe(1);
    expect(result.output).toContain(`could not load the jobs module ${module}: the jobs module is broken`);
    expect(await pgdrainConnections()).toEqual([{ n: 0 }]);
  });

  it('with a DATABASE_URL that carries its secrets as parameters: exits 1 saying why, and prints no secret', async () => {
    for (const url of [
      'postgres://postgres@127.0.0.1:1/app?password=hunter2-secret-xyz',
      'postgresql://postgres:hunter2-secret-xyz@127.0.0.1:1/app?sslpassword=hunter2-secret-xyz&application_name=x',
    ]) {
      const result = await runCli({ DATABASE_URL: url, API_TOKEN: 'startup-test-token-0123456789', PORT: '0' });
      expect(result.code).toBe(1);
      expect(result.output).toContain('could not start: migrations failed on postgres');
      expect(result.output).toContain('127.0.0.1:1/app?');
      expect(result.output).not.toContain('hunter2-secret-xyz');
    }
  });

  it('with DATABASE_URL and its port in use: exits 1, and no connection of it is left on the database', async () => {
    const result = await runCli({
      DATABASE_URL: t.url,
      API_TOKEN: 'startup-test-token-0123456789',
      PORT: String(busyPort),
    });
    expect(result.code).toBe(1);
    expect(result.output).toContain('is already in use');
    expect(await pgdrainConnections()).toEqual([{ n: 0 }]);
  });
});
