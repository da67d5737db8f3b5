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
// Which migrations are online is in docs/operations.md (Upgrading).
//
// Any number of processes may migrate at once (replicas that start together). One migrates; the
// others wait until it is done, then find nothing to do. The lock is a transaction-level advisory
// lock held by an idle transaction on a connection of its own, for as long as the migration runs:
// it cannot outlive that transaction — a process killed, a connection dropped, a transaction
// pooler (which pins the connection to the open transaction and rolls it back when its client
// goes) all end it — where a session lock would stay held on a pooled connection after the process
// that took it exited. The others ask for it with pg_try_advisory_xact_lock, a statement that
// answers at once, and ask again after a pause: never a statement that waits. A waiting statement
// holds a snapshot, and CREATE INDEX CONCURRENTLY waits for every transaction with an older one —
// the waiter waited for the migrator, which waited for the waiter (the deadlock of replicas
// starting together on a fresh database); a DBA's statement_timeout cancelled it too. The wait is
// said once (who holds the lock, since when) and bounded (MigrateOptions.maxWaitSeconds). Nothing
// here sets a session setting: each setting is SET LOCAL inside the transaction it is for, so no
// setting leaks to a pooled connection.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readMigrationFiles, type MigrationMeta } from 'drizzle-orm/migrator';
import pg from 'pg';
import { PgdrainError } from '../errors.ts';
import { applyFunctions, type FunctionsApplied } from './functions.ts';
import { libpqUrl } from './url.ts';
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
/** The advisory lock every migrate takes (one key for pgdrain's schema). */
const MIGRATION_LOCK_KEY = 7477853620;
/** How long a migrate waits for another process's migration by default, in seconds. */
export const MIGRATION_WAIT_SECONDS = 600;

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
  /** Told once when another process is migrating and this one waits for it to finish: who holds
   * the lock (its application_name, backend pid) and since when, when the server says. */
  onWaiting?: (holder: MigrationHolder) => void;
  /** The longest wait for another process's migration, in seconds, before MigrationWaitError.
   * Default MIGRATION_WAIT_SECONDS (10 minutes). */
  maxWaitSeconds?: number;
  /** Stops a wait for the lock, or the migration between statements (a SIGTERM while starting):
   * the migrate rejects with the signal's reason; what it applied is kept, the rest is applied by
   * the next migrate. */
  signal?: AbortSignal;
}

/** Who holds the migration lock, as pg_stat_activity says (nulls where the server does not say:
 * another role's session shows only its pid). */
export interface MigrationHolder {
  pid: number | null;
  applicationName: string | null;
  since: Date | null;
}

/** Another process held the migration lock for longer than maxWaitSeconds. */
export class MigrationWaitError extends PgdrainError {
  override name = 'MigrationWaitError';
  readonly code = 'migration_wait';
}

/** What a migrate did. */
export interface MigrationReport {
  /** The migrations applied, by name ("0027_…"), in order; empty when the schema was current. */
  migrations: string[];
  /** The functions (re)created and dropped; both empty when every function was current. */
  functions: FunctionsApplied;
}

/** Brings the database at `databaseUrl` up to date; any number of processes may call it at once
 * (see the header): one migrates, the others wait for it and find the work done. */
export async function migrateDatabase(databaseUrl: string, options: MigrateOptions = {}): Promise<MigrationReport> {
  const url = libpqUrl(databaseUrl);
  const lock = await holdMigrationLock(url, options);
  const client = new pg.Client({ connectionString: url, application_name: 'pgdrain-migrate' });
  // An error after connect (server restart) must not crash the caller; the query fails instead.
  client.on('error', () => {});
  // An abort ends the connection: the statement in flight fails, its transaction rolls back.
  const abort = () => void client.end().catch(() => {});
  options.signal?.addEventListener('abort', abort, { once: true });
  try {
    await client.connect();
    return await migrateUnderLock(client, options);
  } catch (error) {
    options.signal?.throwIfAborted();
    throw error;
  } finally {
    options.signal?.removeEventListener('abort', abort);
    await client.end().catch(() => {});
    await lock.release();
  }
}

async function migrateUnderLock(client: pg.Client, options: MigrateOptions): Promise<MigrationReport> {
  {
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
      await createHistoryPartitions(client);
    return { migrations: applied, functions };
  }
}

/** pgdrain.maintain_history() once, in a transaction of its own without a DBA's statement_timeout
 * (its 32 day partitions are DDL that a slow or loaded server may take longer over than the app's
 * queries are given: CI saw a 300 ms timeout cancel it after every migration had committed). A lock
 * not granted within the function's own lock_timeout is left for the next housekeeping round. */
async function createHistoryPartitions(client: pg.Client): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query('SET LOCAL statement_timeout = 0');
    await client.query(`SELECT ${pg.escapeIdentifier(PGDRAIN_SCHEMA)}.maintain_history()`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    if ((error as { code?: string }).code !== '55P03') throw error;
  }
}

/**
 * Takes the migration lock on a connection of its own (see the header) and keeps its transaction
 * open until release(): tries at once, then every 100 ms to 1 s, telling onWaiting once; rejects
 * with MigrationWaitError after maxWaitSeconds, or with the signal's reason when it aborts.
 */
async function holdMigrationLock(databaseUrl: string, options: MigrateOptions): Promise<{ release(): Promise<void> }> {
  const maxWaitMs = (options.maxWaitSeconds ?? MIGRATION_WAIT_SECONDS) * 1000;
  const client = new pg.Client({ connectionString: databaseUrl, application_name: 'pgdrain-migrate-lock' });
  client.on('error', () => {});
  const release = async () => {
    await client.query('COMMIT').catch(() => {});
    await client.end().catch(() => {});
  };
  try {
    options.signal?.throwIfAborted();
    await client.connect();
    const started = performance.now();
    for (let tries = 1; ; tries++) {
      options.signal?.throwIfAborted();
      await client.query('BEGIN');
      // A DBA's idle-in-transaction timeout would end the lock while the migration runs.
      await client.query('SET LOCAL idle_in_transaction_session_timeout = 0');
      // A statement without parameters (the simple protocol): a parameterised one leaves its portal,
      // and the portal's snapshot, open in the transaction, which CREATE INDEX CONCURRENTLY on the
      // migrating connection would then wait for, for ever.
      const { rows } = await client.query<{ locked: boolean }>(
        `SELECT pg_try_advisory_xact_lock(${MIGRATION_LOCK_KEY}) AS locked`,
      );
      if (rows[0]?.locked) return { release };
      await client.query('ROLLBACK');
      if (tries === 1) options.onWaiting?.(await migrationHolder(client));
      const waited = performance.now() - started;
      if (waited >= maxWaitMs) {
        const holder = await migrationHolder(client);
        throw new MigrationWaitError(
          `another process has held pgdrain's migration lock for more than ${Math.round(maxWaitMs / 1000)} s ` +
            `(${describeHolder(holder)}); if it is stuck, end that session (SELECT pg_terminate_backend(pid)) and ` +
            'start again',
        );
      }
      await abortableSleep(Math.min(1_000, 100 * tries), options.signal);
    }
  } catch (error) {
    await client.end().catch(() => {});
    throw error;
  }
}

/** Who holds the migration lock now (the advisory lock's key split as pg_locks shows it). */
async function migrationHolder(client: pg.Client): Promise<MigrationHolder> {
  const { rows } = await client.query<{ pid: number | null; application_name: string | null; since: Date | null }>(
    `SELECT l.pid, a.application_name, coalesce(a.xact_start, a.backend_start) AS since
       FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
        AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      LIMIT 1`,
    [Math.floor(MIGRATION_LOCK_KEY / 2 ** 32), MIGRATION_LOCK_KEY % 2 ** 32],
  );
  const row = rows[0];
  return { pid: row?.pid ?? null, applicationName: row?.application_name ?? null, since: row?.since ?? null };
}

/** "pgdrain-migrate-lock, backend pid 4242, since 2026-12-07T10:00:00.000Z". */
export function describeHolder(holder: MigrationHolder): string {
  if (holder.pid === null) return 'it has just finished';
  return [
    holder.applicationName || 'an unnamed session',
    `backend pid ${holder.pid}`,
    ...(holder.since ? [`since ${holder.since.toISOString()}`] : []),
  ].join(', ');
}

function abortableSleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
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
      await setLocalTimeouts(client);
      await lockTablesFirst(client, migration.sql);
      for (const statement of migration.sql) await run(client, statement);
      await client.query(record);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    }
  });
}

/** Every table a migration alters, locked before its first statement, pgdrain.jobs first: the
 * order the drain's statements take them in. Altered one at a time, the migration held the first
 * table (job_counts) while it waited for pgdrain.jobs, and a settlement holding pgdrain.jobs waited
 * for job_counts behind it: a lock cycle that a busy drain renewed at every retry, so the migration
 * never got through (seen with a drainer of the last release running beside it). Waiting for
 * pgdrain.jobs with nothing held, it queues only that table's new lockers, for lock_timeout at most. */
async function lockTablesFirst(client: pg.Client, statements: readonly string[]): Promise<void> {
  const named = new Map<string, { schema: string; table: string }>();
  for (const statement of statements) {
    // Comments hold prose ("one ALTER TABLE at a time"); only the statement's own words count.
    const code = statement.replace(/--[^\n]*/g, '');
    for (const m of code.matchAll(/\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?"([^"]+)"\."([^"]+)"/gi))
      named.set(`${m[1]}.${m[2]}`, { schema: m[1]!, table: m[2]! });
  }
  if (named.size === 0) return;
  // The ones that exist (a migration may alter a table it creates), by name: nothing here can fail on
  // a name, on any server version.
  const tables = [...named.values()];
  const { rows } = await client.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name
       FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(schema_name, table_name, ord)
       JOIN pg_namespace n ON n.nspname = t.schema_name
       JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.table_name
      ORDER BY (n.nspname = 'pgdrain' AND c.relname = 'jobs') DESC, t.ord`,
    [tables.map((t) => t.schema), tables.map((t) => t.table)],
  );
  if (rows.length > 0) await client.query(`LOCK TABLE ${rows.map((r) => r.name).join(', ')} IN ACCESS EXCLUSIVE MODE`);
}

/** Statement by statement, each in a transaction of its own retried while its lock is not granted
 * within LOCK_TIMEOUT_MS — but a CONCURRENTLY one, which cannot run in a transaction, and needs no
 * lock_timeout: its lock (SHARE UPDATE EXCLUSIVE) queues no enqueue or claim behind it. */
async function applyOnline(
  client: pg.Client,
  migration: MigrationMeta,
  record: pg.QueryConfig,
  busy: (tries: number) => void,
): Promise<void> {
  for (const statement of migration.sql) {
    if (statement.trim() === '') continue;
    if (CONCURRENTLY.test(statement)) {
      await dropInvalidIndex(client, statement);
      await run(client, statement);
      continue;
    }
    await retriedWhileLockNotGranted(busy, async () => {
      await client.query('BEGIN');
      try {
        await setLocalTimeouts(client);
        await run(client, statement);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      }
    });
  }
  await client.query(record);
}

const CONCURRENTLY =
  /^\s*(?:--[^\n]*\n\s*)*(?:CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX)[^;]*\bCONCURRENTLY\b/i;

/** A migration transaction's settings, for it alone (SET LOCAL: nothing outlives it on a pooled
 * connection): a short lock_timeout (above), and no statement_timeout — a DBA's timeout for the
 * app's queries would cancel a migration half way. */
async function setLocalTimeouts(client: pg.Client): Promise<void> {
  await client.query(`SET LOCAL lock_timeout = ${LOCK_TIMEOUT_MS}; SET LOCAL statement_timeout = 0`);
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
