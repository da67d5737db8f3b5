// The sidecar's settings from its environment, read through the one settings schema
// (src/settings.ts): a bad value stops the start with a message naming the variable. The options
// are the settings themselves (SidecarOptions extends them): nothing is copied field by field.
import { readSettings } from '../settings.ts';
import type { SidecarOptions } from './index.ts';

export function sidecarOptionsFromEnv(env: Record<string, string | undefined>): SidecarOptions {
  const { kinds, ...settings } = readSettings(env, 'sidecar');
  // Only what the sidecar reads, and none that is unset: the options' own defaults apply then.
  const given = Object.entries(settings).filter(([, value]) => value !== undefined);
  return { ...Object.fromEntries(given), ...(kinds && kinds.length > 0 ? { kinds } : {}) } as SidecarOptions;
}
