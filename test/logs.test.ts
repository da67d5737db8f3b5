// The sidecar's log: readable lines on a terminal, JSON lines on a pipe, LOG_FORMAT overriding.
// The terminal is a real pseudo-terminal from util-linux's `script`.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { QUICK_DRIZZLE } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const FIXTURE = fileURLToPath(new URL('./fixtures/sidecar-with-test-kinds.ts', import.meta.url));
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

/** Runs the sidecar until it has started and stopped again; returns what it printed. */
async function runSidecar(options: { terminal: boolean; env?: Record<string, string> }): Promise<string> {
  const env = {
    PATH: process.env.PATH ?? '',
    DATABASE_URL: t.url,
    API_TOKEN: 'log-test-token-0123456789',
    PORT: '0',
    TERM: 'xterm',
    ...options.env,
  };
  const command = `exec '${process.execPath}' --import '${QUICK_DRIZZLE}' '${FIXTURE}'`;
  const child = options.terminal
    ? spawn('script', ['-qefc', command, '/dev/null'], { env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] })
    : spawn(process.execPath, ['--import', QUICK_DRIZZLE, FIXTURE], {
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
  let out = '';
  child.stdout!.on('data', (c) => (out += c));
  child.stderr!.on('data', (c) => (out += c));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  try {
    await until(
      async () => out,
      (o) => o.includes('sidecar started'),
      20_000,
      'the sidecar to start',
    );
  } finally {
    process.kill(-child.pid!, 'SIGTERM');
  }
  await exited;
  return out;
}

// util-linux's `script` (Debian: bsdutils, installed by .ci/run when missing) makes the terminal.
const haveScript = spawnSync('script', ['--version']).status === 0;
if (!haveScript)
  console.warn('logs.test.ts: no `script` command (apt-get install bsdutils): the terminal cases are skipped');

describe('sidecar logs', () => {
  it.skipIf(!haveScript)(
    'are readable lines on a terminal',
    async () => {
      const out = await runSidecar({ terminal: true });
      expect(out).toMatch(/INFO.*sidecar started/);
      expect(out).not.toContain('{"level":');
      expect(out).toMatch(/\d\d:\d\d:\d\d\.\d{3}/); // a time of day, not epoch milliseconds
    },
    30_000,
  );

  it('are JSON lines on a pipe', async () => {
    const out = await runSidecar({ terminal: false });
    const lines = out.split('\n').filter((l) => l.startsWith('{'));
    expect(lines.some((l) => JSON.parse(l).msg === 'sidecar started')).toBe(true);
    expect(out).not.toMatch(/INFO.*sidecar started/);
  }, 30_000);

  it.skipIf(!haveScript)(
    'a generated token: the terminal is told where it is and how to use it, never the token; JSON mode logs only its file',
    async () => {
      const dataDir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-logs-'));
      try {
        const env = { API_TOKEN: '', PGDRAIN_DATA_DIR: dataDir };
        const pretty = await runSidecar({ terminal: true, env });
        const file = path.join(dataDir, 'api-token');
        const token = (await readFile(file, 'utf8')).trim();
        expect(pretty).toContain(`pgdrain generated an API token and saved it in ${file} (readable by you only).`);
        expect(pretty).toContain(`curl -s -H "Authorization: Bearer $(cat '${file}')"`);
        expect(pretty).not.toContain(token);
        await rm(file);
        const json = await runSidecar({ terminal: true, env: { ...env, LOG_FORMAT: 'json' } });
        const regenerated = (await readFile(file, 'utf8')).trim();
        expect(json).not.toContain(regenerated);
        expect(json).not.toContain('pgdrain generated an API token');
        expect(json).toContain(`"tokenFile":"${file}"`);
      } finally {
        await rm(dataDir, { recursive: true, force: true });
      }
    },
    60_000,
  );

  it.skipIf(!haveScript)(
    'LOG_FORMAT=json on a terminal gives JSON, LOG_FORMAT=pretty on a pipe gives lines',
    async () => {
      expect(await runSidecar({ terminal: true, env: { LOG_FORMAT: 'json' } })).toContain('"msg":"sidecar started"');
      expect(await runSidecar({ terminal: false, env: { LOG_FORMAT: 'pretty' } })).toMatch(/INFO.*sidecar started/);
    },
    60_000,
  );
});
