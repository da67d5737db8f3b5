// wrangler.hyperdrive.toml is wrangler.toml plus a Hyperdrive binding: the two must not drift apart
// (a setting changed in one and forgotten in the other would make the Hyperdrive Worker differ).
import { unstable_readConfig } from 'wrangler';
import { describe, expect, it } from 'vitest';

const read = (config: string) => unstable_readConfig({ config }) as unknown as Record<string, unknown>;
const COMPARED = [
  'name',
  'main',
  'compatibility_date',
  'compatibility_flags',
  'build',
  'triggers',
  'limits',
  'vars',
  'durable_objects',
  'migrations',
] as const;

describe('the two wrangler configurations', () => {
  const neon = read('wrangler.toml');
  const hyperdrive = read('wrangler.hyperdrive.toml');

  it('share every setting', () => {
    for (const key of COMPARED)
      expect(JSON.parse(JSON.stringify(hyperdrive[key])), key).toEqual(JSON.parse(JSON.stringify(neon[key])));
  });

  it('differ only in the Hyperdrive binding, which the Neon one lacks', () => {
    expect(neon.hyperdrive).toEqual([]);
    expect(JSON.parse(JSON.stringify(hyperdrive.hyperdrive))).toEqual([
      { binding: 'HYPERDRIVE', id: expect.stringMatching(/^[0-9a-f]{32}$/) },
    ]);
  });
});
