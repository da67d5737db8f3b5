// The dashboard's browser code is a typed module like the rest of the project: `tsc` checks it
// (strict, DOM types) in `npm test`, and what the app serves is exactly its bundle.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { createApp } from '../../src/http/app.ts';
import { createDefaultRegistry } from '../../src/jobs/index.ts';
// @ts-expect-error: a plain .mjs script without types
import { bundleDashboard } from '../../scripts/build-dashboard.mjs';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const SOURCE = path.join(ROOT, 'src/http/dashboard/browser/dashboard.ts');

it('tsc checks the browser module as part of the project, with the DOM types and strict settings', async () => {
  const { stdout } = await run(path.join(ROOT, 'node_modules/.bin/tsc'), ['-p', '.', '--listFilesOnly'], { cwd: ROOT });
  expect(stdout.split('\n').map((f) => path.resolve(ROOT, f.trim()))).toContain(SOURCE);
  const config = JSON.parse((await readFile(path.join(ROOT, 'tsconfig.json'), 'utf8')).replace(/^\s*\/\/.*$/gm, ''));
  expect(config.compilerOptions).toMatchObject({
    strict: true,
    noUncheckedIndexedAccess: true,
    lib: expect.arrayContaining(['DOM']),
  });
});

it('the script served at /dashboard/script.js is the bundle of that module as it is now', async () => {
  const app = createApp({
    withDb: () => Promise.reject(new Error('unused')),
    registry: createDefaultRegistry({}),
    apiToken: 'dashboard-build-token-01234',
  });
  const served = await (await app.request('/dashboard/script.js')).text();
  // Bundled again from the source now: the same code, so the generated module is not stale.
  expect(served).toBe(await bundleDashboard());
  // Types are gone; the behaviour's landmarks are there.
  expect(served).not.toMatch(/:\s*(HTMLElement|QueueStats|Promise<void>)\b/);
  for (const landmark of ['pgdrain.token', '/stats/throughput?minutes=60', 'X-Pgdrain-Scope', 'textContent'])
    expect(served).toContain(landmark);
});
