// One settings schema for both runtimes (src/settings.ts): the configuration page's table says
// what it says, a bad value is refused alike by the sidecar's and the Worker's reading of it, and
// the facts that SQL repeats (pgdrain.enqueue()'s defaults and kind pattern) match TypeScript's.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SETTINGS, type SettingName, SettingsError, documentedDefault, readSettings } from '../../src/settings.ts';

/** The rows of the table of docs/configuration.md: variable → [sidecar, Worker] defaults. */
function readmeConfiguration(): Map<string, [string, string]> {
  const section = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
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
