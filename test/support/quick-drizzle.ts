// Preloaded (`node --import`) by the tests' sidecar processes: the resolver hook the `pgdrain` command
// registers before it loads the rest (src/entry/drizzle-loading.ts), so a test's process starts as
// `pgdrain start` does — about a CPU-second sooner than a plain import of the sidecar library.
import { loadDrizzleQuicker } from '../../src/entry/drizzle-loading.ts';

loadDrizzleQuicker();
