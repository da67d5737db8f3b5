// One settings schema for both runtimes (src/settings.ts): the configuration page's table says
// what it says, a bad value is refused alike by the sidecar's and the Worker's reading of it, and
// the facts that SQL repeats (pgdrain.enqueue()'s defaults and kind pattern) match TypeScript's.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JOB_DEFAULTS, KIND_PATTERN } from '../src/db/schema.ts';
import { SETTINGS, type SettingName, SettingsError, documentedDefault, readSettings } from '../src/settings.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

/** The rows of the table of docs/configuration.md: variable → [sidecar, Worker] defaults. */
function readmeConfiguration(): Map<string, [string, string]> {
  const section = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
  const rows = new Map<string, [string, string]>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const variable = /^`([A-Z_]+)`$/.exec(cells[1] ?? '')?.[1];
    if (variable) rows.set(variable, [cells[2]!.replace(/`/g, ''), cells[3]!.replace(/`/g, '')]);
  }
  return rows;
}

describe('the configuration table (docs/configuration.md)', () => {
  it('lists every setting, with the default each runtime uses, and nothing else', () => {
    const readme = readmeConfiguration();
    const expected = new Map(
      (Object.entries(SETTINGS) as [SettingName, (typeof SETTINGS)[SettingName]][]).map(([name, spec]) => [
        spec.env,
        [
          (spec.runtimes as readonly string[]).includes('sidecar') ? documentedDefault(name, 'sidecar') : '—',
          (spec.runtimes as readonly string[]).includes('worker') ? documentedDefault(name, 'worker') : '—',
        ],
      ]),
    );
    expect(Object.fromEntries(readme)).toEqual(Object.fromEntries(expected));
  });
});

describe('a bad value is refused by both runtimes, naming the variable', () => {
  for (const [variable, value, message] of [
    ['BATCH_SIZE', '5000', 'must be at most 1000'],
    ['BATCH_SIZE', 'lots', 'must be a whole number'],
    ['VISIBILITY_TIMEOUT_SECONDS', '0', 'must be at least 1'],
    ['RECORD_COUNTS', 'yes', 'must be true or false'],
    [
      'API_TOKENS',
      'root:abcdefghijklmnopqrstuvwxyz',
      'entry 1: write scope:token with a scope of enqueue, read, admin',
    ],
    ['API_TOKEN', 'short', 'use at least 16 characters'],
    [
      'WEBHOOK_ALLOWED_HOSTS',
      'hooks.example.com, hooks.example.com:99999',
      'entry "hooks.example.com:99999" has a port outside 1-65535',
    ],
  ] as const) {
    it(`${variable}=${value}`, () => {
      for (const runtime of ['sidecar', 'worker'] as const) {
        const refusal = (() => {
          try {
            readSettings({ [variable]: value }, runtime);
          } catch (error) {
            return error;
          }
        })();
        expect(refusal).toBeInstanceOf(SettingsError);
        expect((refusal as SettingsError).problems).toEqual([{ env: variable, message }]);
        expect((refusal as Error).message).toBe(`invalid settings: ${variable}: ${message}`);
      }
    });
  }

  it('CONCURRENCY has the bound of its runtime: the Worker holds 6 connections', () => {
    expect(readSettings({ CONCURRENCY: '50' }, 'sidecar').concurrency).toBe(50);
    expect(() => readSettings({ CONCURRENCY: '50' }, 'worker')).toThrow(
      'invalid settings: CONCURRENCY: must be at most 5',
    );
  });

  it('an empty variable is unset, and defaults differ by runtime only where the runtimes differ', () => {
    const sidecar = readSettings({ BATCH_SIZE: '' }, 'sidecar');
    const worker = readSettings({ BATCH_SIZE: '' }, 'worker');
    expect([sidecar.batchSize, sidecar.concurrency, worker.batchSize, worker.concurrency, worker.maxBatchSize]).toEqual(
      [250, 250, 20, 5, 500],
    );
    expect([sidecar.visibilityTimeoutSeconds, worker.visibilityTimeoutSeconds]).toEqual([30, 30]);
    // A setting one runtime does not read is not read there, whatever its value.
    expect(readSettings({ POLL_INTERVAL_MS: 'nonsense' }, 'worker').pollIntervalMs).toBeUndefined();
  });
});

describe('pgdrain.enqueue() in SQL and the TypeScript agree', () => {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
  });
  afterAll(() => t?.close());

  it('on the defaults of max_attempts and priority', async () => {
    const [{ args }] = (await t.query(`SELECT pg_get_function_arguments('pgdrain.enqueue'::regproc) AS args`)) as [
      { args: string },
    ];
    expect(args).toContain(`max_attempts integer DEFAULT ${JOB_DEFAULTS.maxAttempts}`);
    expect(args).toContain(`priority integer DEFAULT ${JOB_DEFAULTS.priority}`);
    await t.query(`SELECT pgdrain.enqueue('noop', '{}')`);
    expect(await t.query('SELECT max_attempts, priority FROM pgdrain.jobs')).toEqual([
      { max_attempts: JOB_DEFAULTS.maxAttempts, priority: JOB_DEFAULTS.priority },
    ]);
  });

  it('on what a kind may be called', async () => {
    const [{ source }] = (await t.query(
      `SELECT prosrc AS source FROM pg_proc WHERE oid = 'pgdrain.enqueue'::regproc`,
    )) as [{ source: string }];
    expect(source).toContain(`'${KIND_PATTERN.source}'`);
    for (const kind of ['a', 'send_receipt', 'v2.mail:x-y', 'x'.repeat(100), '', 'x'.repeat(101), 'a b', 'ü', "a'b"]) {
      const accepted = await t.query(`SELECT pgdrain.enqueue($1, '{}')`, [kind]).then(
        () => true,
        () => false,
      );
      expect([kind, accepted]).toEqual([kind, KIND_PATTERN.test(kind)]);
    }
  });
});
