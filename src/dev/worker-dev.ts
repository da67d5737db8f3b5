// `npm run dev:worker`: the Worker in `wrangler dev` against a local PostgreSQL: an embedded
// PostgreSQL (or DATABASE_URL), migrations, and `wrangler dev --test-scheduled` so that /__scheduled
// runs the cron handler. Two paths, as deployed:
// - default, as on Neon: the Neon driver through the local WebSocket proxy (PROXY_DELAY_MS dials a
//   network latency into it);
// - `-- --hyperdrive`: wrangler.hyperdrive.toml, its HYPERDRIVE binding pointed at the database
//   with CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE (node-postgres in the Worker).
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureDataDir, readOrCreateSecret } from '../db/data-dir.ts';
import { startEmbeddedPostgres } from '../db/embedded.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { redactUrl, withPlaceholderPassword } from '../db/url.ts';
import { settingVariables } from '../settings.ts';
import { startWsProxy } from './ws-proxy.ts';
import { wranglerDevArgs } from './wrangler-dev-args.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dataDir = path.resolve(process.env.PGDRAIN_DATA_DIR ?? path.join(root, '.pgdrain'));
const port = Number(process.env.PORT ?? 8787);
const args = process.argv.slice(2);
const unknown = args.filter((arg) => arg !== '--hyperdrive');
if (unknown.length > 0) {
  console.error(`dev:worker: unknown option ${unknown.join(' ')} (the only one is --hyperdrive)`);
  process.exit(2);
}
const hyperdrive = args.includes('--hyperdrive');

await ensureDataDir(dataDir);
const secret = (name: string) => readOrCreateSecret(path.join(dataDir, name));

const embedded = process.env.DATABASE_URL
  ? null
  : await startEmbeddedPostgres({
      dataDir: path.join(dataDir, 'postgres'),
      password: await secret('postgres-password'),
    });
const databaseUrl = process.env.DATABASE_URL ?? embedded!.url;
await migrateDatabase(databaseUrl);
const target = new URL(databaseUrl);
// PROXY_DELAY_MS=5: each direction 5 ms later, a 10 ms round trip, as from a Worker to Neon.
const delayMs = Number(process.env.PROXY_DELAY_MS ?? 0);
if (!Number.isFinite(delayMs) || delayMs < 0)
  throw new Error('PROXY_DELAY_MS: a one-way delay in milliseconds, 0 or more');
if (hyperdrive && delayMs > 0)
  console.warn('dev:worker: PROXY_DELAY_MS applies to the Neon path only; --hyperdrive connects directly');
const proxy = hyperdrive
  ? null
  : await startWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) }, delayMs });
const apiToken = process.env.API_TOKEN ?? (await secret('api-token'));

// The Worker's settings (src/settings.ts), taken from this process's environment when set there, so a
// local run is configured without editing wrangler.toml (they win over its [vars]). The database
// and the API token are set below.
const WORKER_SETTINGS = settingVariables('worker').filter((name) => name !== 'DATABASE_URL' && name !== 'API_TOKEN');
const passed = WORKER_SETTINGS.filter((name) => process.env[name] !== undefined && !/[\r\n]/.test(process.env[name]!));

// Secrets go to wrangler in an env file only its owner can read, not on the command line.
const envFile = path.join(dataDir, 'worker-dev.env');
await writeFile(
  envFile,
  [
    ...(proxy ? [`DATABASE_URL=${databaseUrl}`, `NEON_WS_PROXY=${proxy.address}`] : []),
    `API_TOKEN=${apiToken}`,
    ...passed.map((name) => `${name}=${process.env[name]}`),
    '',
  ].join('\n'),
  { mode: 0o600 },
);
if (passed.length > 0) console.log(`dev:worker: from your environment: ${passed.join(', ')}`);

console.log(
  proxy
    ? `dev:worker: database ${redactUrl(databaseUrl)} through the WebSocket proxy at ${proxy.address}${
        delayMs ? ` (+${delayMs} ms each way)` : ''
      }`
    : `dev:worker: database ${redactUrl(databaseUrl)} through the local Hyperdrive binding HYPERDRIVE ` +
        `(wrangler.hyperdrive.toml)`,
);
console.log(`dev:worker: API token in ${path.join(dataDir, 'api-token')}`);
console.log(
  `dev:worker: try  curl -H "Authorization: Bearer $(cat ${path.join(dataDir, 'api-token')})" ` +
    `http://127.0.0.1:${port}/stats`,
);
console.log(`dev:worker: run the cron handler with  curl 'http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*'`);

// The queue's clock (a Durable Object) keeps its state beside the database it caches, not in the
// repo's .wrangler/: another database (PGDRAIN_DATA_DIR, a test's) gets a clock of its own.
const wranglerArgs = wranglerDevArgs({
  port,
  envFile,
  stateDir: path.join(dataDir, 'wrangler-state'),
  config: hyperdrive ? 'wrangler.hyperdrive.toml' : undefined,
});
const wrangler = spawn(path.join(root, 'node_modules/.bin/wrangler'), wranglerArgs, {
  cwd: root,
  stdio: 'inherit',
  // Local Hyperdrive takes its target from the environment and insists on a password.
  env: hyperdrive
    ? { ...process.env, CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE: withPlaceholderPassword(databaseUrl) }
    : process.env,
});
const shutdown = async (code: number) => {
  await proxy?.close();
  await embedded?.stop();
  process.exit(code);
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => wrangler.kill(signal));
wrangler.on('exit', (code) => void shutdown(code ?? 0));
