// The core both runtimes wrap (src/runtime/core.ts), without a database: each runtime's drain
// options and API configuration from its settings, and when a drainer drains again.
import { describe, expect, it } from 'vitest';
import { apiConfigFor, drainAgainAt, drainOptionsFor, registryFor } from '../../src/runtime/core.ts';
import { DRAIN_PROFILES } from '../../src/drain/profiles.ts';
import { readSettings, withDefaults } from '../../src/settings.ts';

describe('settings with their defaults', () => {
  it('a sidecar given nothing runs with every default of the table; what it is given wins', () => {
    const given = withDefaults({ batchSize: 7 }, 'sidecar');
    expect(given).toEqual({ ...readSettings({}, 'sidecar'), batchSize: 7 });
    expect(given.pollIntervalMs).toBe(1000);
    expect(given.maxBatchSize).toBeUndefined(); // a Worker's setting
  });
});

describe('drain options per runtime', () => {
  it('the sidecar drains near the database, the Worker far from it, each with its profile by default', () => {
    const sidecar = drainOptionsFor(readSettings({}, 'sidecar'), 'sidecar');
    const worker = drainOptionsFor(readSettings({}, 'worker'), 'worker');
    expect(sidecar).toMatchObject({ placement: 'near', batchSize: DRAIN_PROFILES.near.batchSize, kinds: undefined });
    expect(worker).toMatchObject({
      placement: 'far',
      batchSize: DRAIN_PROFILES.far.batchSize,
      maxBatchSize: DRAIN_PROFILES.far.maxBatchSize,
      concurrency: DRAIN_PROFILES.far.concurrency,
    });
  });

  it('KINDS limits the drain; set empty, it drains every kind', () => {
    expect(drainOptionsFor(readSettings({ KINDS: 'a, b' }, 'worker'), 'worker').kinds).toEqual(['a', 'b']);
    expect(drainOptionsFor(readSettings({ KINDS: ' , ' }, 'worker'), 'worker').kinds).toBeUndefined();
  });

  it("the API's configuration: the settings' tokens, or the sidecar's generated one", () => {
    const settings = readSettings({ API_TOKEN: 'a-token-of-sixteen-chars', RECORD_COUNTS: 'false' }, 'worker');
    expect(apiConfigFor(settings)).toMatchObject({ apiToken: 'a-token-of-sixteen-chars', recordCounts: false });
    expect(apiConfigFor(settings, 'generated-token-0123456').apiToken).toBe('generated-token-0123456');
  });

  it('the registry has the built-in kinds and refuses a schedule of a kind it does not have', () => {
    const settings = readSettings({}, 'sidecar');
    expect(registryFor(settings, [], []).kinds()).toEqual(expect.arrayContaining(['noop', 'webhook']));
    expect(() =>
      registryFor(settings, [], [{ name: 'nightly', cron: '0 3 * * *', kind: 'missing', payload: {} }]),
    ).toThrow(/missing/);
  });
});

describe('when to drain again', () => {
  const quiet = { nextClaimAt: null, stoppedBy: 'empty' } as const;

  it('not at all when nothing is due: a notice, the poll or the clock says when', () => {
    expect(drainAgainAt(quiet)).toBeNull();
    expect(drainAgainAt(quiet, { handedBack: 0, dueAt: Number.POSITIVE_INFINITY })).toBeNull();
  });

  it('at once when the reap handed jobs back after a drain that ran out of work, not after one that ran out of budget', () => {
    const now = Date.now();
    expect(drainAgainAt(quiet, { handedBack: 3 })).toBeGreaterThanOrEqual(now);
    expect(drainAgainAt(quiet, { handedBack: 3 })! - now).toBeLessThan(1_000);
    expect(drainAgainAt({ nextClaimAt: null, stoppedBy: 'budget' }, { handedBack: 3 })).toBeNull();
  });

  it("at the earliest of a limited kind's next allowed claim and a settled job's due time", () => {
    const at = Date.now() + 5_000;
    expect(drainAgainAt({ nextClaimAt: at, stoppedBy: 'empty' })).toBe(at);
    expect(drainAgainAt({ nextClaimAt: at, stoppedBy: 'empty' }, { dueAt: at - 2_000 })).toBe(at - 2_000);
    expect(drainAgainAt(quiet, { dueAt: at })).toBe(at);
  });
});
