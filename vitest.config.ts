import { cloudflareTest } from '@cloudflare/vitest-plugin';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The machine has 2 cores and PostgreSQL shares them.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/workers/**'],
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
      {
        // Inside workerd, on the Neon serverless driver, through the local WebSocket proxy.
        plugins: [
          cloudflareTest(({ inject }) => {
            const urls = JSON.parse(inject('workerDatabaseUrls')) as Record<string, string>;
            return {
              wrangler: { configPath: './wrangler.toml' },
              miniflare: {
                bindings: {
                  NEON_WS_PROXY: inject('wsProxyAddress'),
                  DATABASE_URL: urls.api!,
                  CONFORMANCE_DATABASE_URL: urls.conformance!,
                  SCHEDULED_DATABASE_URL: urls.scheduled!,
                  HOSTILE_DATABASE_URL: urls.hostile!,
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
