// Brings a database up to date in two steps. First the drizzle-kit migrations in drizzle/ (their
// files, journal and drizzle's migrations table, `pgdrain.migrations`, exactly as drizzle's own
// migrator keeps them): ordered, each applied once, schema changes only. Then the SQL functions:
// each function's live text is one file in src/sql/functions/ (functions.ts), applied whenever a
// file changed — a repeatable step, so a function is never defined twice and never lives in a
// migration. Node only (it reads files); the Worker's database is migrated from a workstation or
// CI with `npx pgdrain migrate` (or `npm run db:migrate` in this repo) and DATABASE_URL pointing at Neon.
//
// Why not drizzle's migrator: it runs every pending migration in one transaction, and PostgreSQL
// builds an index without blocking writes (CREATE INDEX CONCURRENTLY) only outside a transaction.
// So a migration whose first line is `-- pgdrain: online` runs here statement by statement, each
// under a short lock_timeout that is retried (a statement waiting for its lock behind a busy table
// would otherwise hold every enqueue and claim queued behind it), and is written to be re-run
// safely if a run stops half way. Other migrations run as drizzle runs them, in a transaction, but
// under the same lock_timeout, the whole transaction retried.
// Which migrations are online is in the README (Upgrading).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readMigrationFiles, type MigrationMeta } from 'drizzle-orm/migrator';
import pg from 'pg';
import { applyFunctions, type FunctionsApplied } from './functions.ts';
import { PGDRAIN_SCHEMA } from './schema.ts';

/** drizzle/ beside src/ in this repo, beside dist/ in the npm package. A function, not a constant:
 * a Worker that imports the package's main entry must not resolve a file path at load time. */
export const migrationsFolder = (): string => fileURLToPath(new URL('../../drizzle', import.meta.url));
export const MIGRATIONS_TABLE = 'migrations';

/** The first line of a migration that runs statement by statement, outside a transaction. */
const ONLINE_MARKER = /^\s*-- pgdrain: online\b/;
/** An online statement waits at most this long for its lock before trying again later, so the
 * enqueues and claims queued behind it wait no longer than this either. */
const LOCK_TIMEOUT_MS = 400;
const LOCK_RETRIES = 150;

export interface MigrateOptions {
  /** Another folder of migrations (tests: the folder of an older release). With it, the functions
   * step runs only when `functions` names a folder too: an older release's migrations defined its
   * functions themselves. */
  folder?: string;
  /** Another folder of function files, or false: no functions step. Default: src/sql/functions,
   * unless `folder` is given. */
  functions?: string | false;
  /** Told when a migration steps back because a table it must lock is held by another transaction
   * (the first time, then every 20th try), so an operator sees why the upgrade is waiting. */
  onLockBusy?: (migration: string, tries: number) => void;
}

/** What a migrate did. */
export interface MigrationReport {
  /** The migrations applied, by name ("0027_…"), in order; empty when the schema was current. */
  migrations: string[];
  /** The functions (re)created and dropped; both empty when every function was current. */
  functions: FunctionsApplied;
}

/** Brings the database at `databaseUrl` up to date; safe to call from several processes at once. */
export async function migrateDatabase(databaseUrl: string, options: MigrateOptions = {}): Promise<MigrationReport> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: 'pgdrain-migrate' });
  // An error after connect (server restart) must not crash the caller; the query fails instead.
  client.on('error', () => {});
  await client.connect();
  try {
    // The advisory lock lets several processes start at once without racing each other.
    await client.query('SELECT pg_advisory_lock(7477853620)');
    const table = `${pg.escapeIdentifier(PGDRAIN_SCHEMA)}.${pg.escapeIdentifier(MIGRATIONS_TABLE)}`;
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${pg.escapeIdentifier(PGDRAIN_SCHEMA)}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${table} (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
    );
    const { rows } = await client.query<{ created_at: string }>(
      `SELECT created_at FROM ${table} ORDER BY created_at DESC LIMIT 1`,
    );
    const last = rows[0] ? Number(rows[0].created_at) : -Infinity;
    const folder = options.folder ?? migrationsFolder();
    const tags = migrationTags(folder);
    const applied: string[] = [];
    for (const migration of readMigrationFiles({ migrationsFolder: folder })) {
      if (migration.folderMillis <= last) continue;
      const record = {
        text: `INSERT INTO ${table} (hash, created_at) VALUES ($1, $2)`,
        values: [migration.hash, migration.folderMillis],
      };
      const name = tags[migration.folderMillis] ?? String(migration.folderMillis);
      const busy = (tries: number) => {
        if (tries % 20 === 1) options.onLockBusy?.(name, tries);
      };
      if (ONLINE_MARKER.test(migration.sql[0] ?? '')) await applyOnline(client, migration, record, busy);
      else await applyInTransaction(client, migration, record, busy);
      applied.push(name);
    }
    const functionsFolder = options.functions ?? (options.folder === undefined ? undefined : false);
    const functions =
      functionsFolder === false
        ? { created: [], dropped: [] }
        : await retriedWhileLockNotGranted(
            (tries) => {
              if (tries % 20 === 1) options.onLockBusy?.('functions', tries);
            },
            () => applyFunctions(client, functionsFolder),
          );
    // The history's day partitions ahead (the housekeeping round keeps them so from now on).
    if (functionsFolder !== false && (applied.length > 0 || functions.created.length > 0))
      await client
        .query(`SELECT ${pg.escapeIdentifier(PGDRAIN_SCHEMA)}.maintain_history()`)
        .catch((error: { code?: string }) => {
          if (error.code !== '55P03') throw error; // a lock not granted in time: the next round does it
        });
    return { migrations: applied, functions };
  } finally {
    await client.end();
  }
}

/** The whole migration in one transaction, under the same short lock_timeout as an online
 * statement: a lock not granted in time (a table such as pgdrain.jobs held by a long transaction —
 * a transactional handler, a report) rolls the transaction back and it is tried again later. A
 * migration that waited for its lock instead would hold every enqueue and claim queued behind its
 * request for as long as that transaction runs. Once its locks are granted, what it does under them
 * still blocks writers while it runs (README, Upgrading: which migrations are online). */
async function applyInTransaction(
  client: pg.Client,
  migration: MigrationMeta,
  record: pg.QueryConfig,
  busy: (tries: number) => void,
): Promise<void> {
  await retriedWhileLockNotGranted(busy, async () => {
    await client.query('BEGIN');
    try {
      await client.query(`SET LOCAL lock_timeout = ${LOCK_TIMEOUT_MS}`);
      for (const statement of migration.sql) await run(client, statement);
      await client.query(record);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    }
  });
}

/** Statement by statement, each retried while its lock is not granted within LOCK_TIMEOUT_MS. */
async function applyOnline(
  client: pg.Client,
  migration: MigrationMeta,
  record: pg.QueryConfig,
  busy: (tries: number) => void,
): Promise<void> {
  await client.query(`SET lock_timeout = ${LOCK_TIMEOUT_MS}`);
  try {
    for (const statement of migration.sql) {
      if (statement.trim() === '') continue;
      await dropInvalidIndex(client, statement);
      await retriedWhileLockNotGranted(busy, () => run(client, statement));
    }
    await client.query(record);
  } finally {
    await client.query('RESET lock_timeout').catch(() => {});
  }
}

/** `attempt` again, after a growing pause, while it fails for a lock not granted within the
 * lock_timeout (55P03): up to LOCK_RETRIES times, some minutes in all, then its error. */
async function retriedWhileLockNotGranted<T>(busy: (tries: number) => void, attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      const { code, cause } = error as { code?: string; cause?: { code?: string } };
      const lockNotGranted = (cause?.code ?? code) === '55P03';
      if (!lockNotGranted || tries >= LOCK_RETRIES) throw error;
      busy(tries);
      await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 50 * tries) * (0.5 + Math.random())));
    }
  }
}

/** Each migration's name (its journal tag, "0018_subscriptions") by its folderMillis. */
function migrationTags(folder: string): Record<number, string> {
  const journal = JSON.parse(readFileSync(path.join(folder, 'meta', '_journal.json'), 'utf8')) as {
    entries: { tag: string; when: number }[];
  };
  return Object.fromEntries(journal.entries.map((e) => [e.when, e.tag]));
}

/** A CREATE INDEX CONCURRENTLY that failed half way leaves an invalid index that IF NOT EXISTS
 * would keep: drop it first, so the re-run builds it. */
async function dropInvalidIndex(client: pg.Client, statement: string): Promise<void> {
  const name = /CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+"([^"]+)"/i.exec(statement)?.[1];
  if (!name) return;
  const { rows } = await client.query(
    `SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid`,
    [PGDRAIN_SCHEMA, name],
  );
  if (rows.length > 0)
    await client.query(
      `DROP INDEX CONCURRENTLY IF EXISTS ${pg.escapeIdentifier(PGDRAIN_SCHEMA)}.${pg.escapeIdentifier(name)}`,
    );
}

/** One statement; a failure says what the database said first, then which statement. */
async function run(client: pg.Client, statement: string): Promise<void> {
  try {
    await client.query(statement);
  } catch (error) {
    const first =
      statement
        .trim()
        .split('\n')
        .find((line) => line.trim() !== '' && !line.trim().startsWith('--')) ?? '';
    throw new Error(`${(error as Error).message} (in the migration statement ${JSON.stringify(first.slice(0, 120))})`, {
      cause: error,
    });
  }
}
