import { cloudflareTest } from '@cloudflare/vitest-plugin';
import { defineConfig } from 'vitest/config';
import { withPlaceholderPassword } from './src/db/url.ts';
import LongestFirst from './test/support/sequencer.ts';


export default defineConfig({
  plugins: [
    {
      // pg requires pg-cloudflare for its sockets in workerd; the package exports the real module
      // only under the "workerd" condition, which the pool's require() resolution does not use.
      name: 'pg-cloudflare-workerd',
      enforce: 'pre',
      resolveId(id: string) {
        if (id === 'pg-cloudflare') return new URL('./node_modules/pg-cloudflare/dist/index.js', import.meta.url).pathname;
      },
    },
  ],
  test: {
    // The machine has 2 cores and PostgreSQL shares them. Three files at once kept them busier (295
    // against 359 s) but failed 3 of 5 clean-clone CI runs on process tests' timings: two it is.
    maxWorkers: 2,
    // The longest files start first (test/support/sequencer.ts).
    sequence: { sequencer: LongestFirst },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        // Everything that needs no database and no process of its own: `npm run test:unit`, seconds.
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
        },
      },
      {
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/workers/**', 'test/unit/**'],
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
      {
        // Inside workerd: the Neon serverless driver through the local WebSocket proxy, and node-postgres
        // through local Hyperdrive bindings.
        plugins: [
          cloudflareTest(({ inject }) => {
            const urls = JSON.parse(inject('workerDatabaseUrls')) as Record<string, string>;
            // Local Hyperdrive bindings read their target from these variables (miniflare wants a password).
            const hyperdrives = {
              HYPERDRIVE_CONFORMANCE: withPlaceholderPassword(urls.hyperdrive_conformance!),
              HYPERDRIVE_SCHEDULED: withPlaceholderPassword(urls.hyperdrive_scheduled!),
              HYPERDRIVE_TRACING: withPlaceholderPassword(urls.hyperdrive_tracing!),
            };
            for (const [name, url] of Object.entries(hyperdrives)) process.env[`CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_${name}`] = url;
            return {
              // wrangler.toml's Worker with the clock under test bound apart (test/workers/wrangler.toml).
              wrangler: { configPath: './test/workers/wrangler.toml' },
              miniflare: {
                hyperdrives,
                bindings: {
                  NEON_WS_PROXY: inject('wsProxyAddress'),
                  DATABASE_URL: urls.api!,
                  CONFORMANCE_DATABASE_URL: urls.conformance!,
                  SCHEDULED_DATABASE_URL: urls.scheduled!,
                  HOSTILE_DATABASE_URL: urls.hostile!,
                  CLIENT_DATABASE_URL: urls.client!,
                  TRACING_DATABASE_URL: urls.tracing!,
                  CLOCK_DATABASE_URL: urls.clock!,
                  SCHEDULE_CLOCK_DATABASE_URL: urls.schedule_clock!,
                  // Tests that do not say otherwise drain for a fixed 25 s, whatever the clock's second.
                  DRAIN_BUDGET_MS: '25000',
                  API_TOKEN: 'worker-test-token-0123456789',
                  API_TOKENS: 'enqueue:worker-enqueue-token-0123, read:worker-read-token-01234567, admin:worker-admin-token-0123456',
                  WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com',
                },
              },
            };
          }),
        ],
        test: {
          name: 'workers',
          include: ['test/workers/**/*.test.ts'],
          globalSetup: ['test/support/workers-global-setup.ts'],
        },
      },
    ],
  },
});
