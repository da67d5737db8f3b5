// What every query takes: any Drizzle PostgreSQL database or transaction. node-postgres (the
// sidecar, the tests) and neon-serverless (the Worker) both satisfy it, so they run the same SQL.
import type { Column, SQL } from 'drizzle-orm';
import { type PgDatabase, PgDialect, type PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import { PgdrainError } from '../errors.ts';

// The schema generic does not matter to the queue's queries; any database or transaction will do.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Db = PgDatabase<PgQueryResultHKT, any, any>;

export { CANCEL_CHANNEL, FINISHED_CHANNEL, NOTIFY_CHANNEL } from '../db/constants.ts';

/** Rows of a raw statement, whichever driver ran it (both return a pg-style result). */
export async function rowsOf<T>(db: Db, query: SQL): Promise<T[]> {
  return rowsOfResult<T>(await db.execute(query));
}

const rowsOfResult = <T>(result: unknown): T[] => {
  const r = result as { rows?: T[] } | T[];
  return Array.isArray(r) ? r : (r.rows ?? []);
};

const dialect = new PgDialect();

/**
 * rowsOf(), as a named prepared statement (`prefix` and a hash of its text): each connection
 * parses and plans it once, then sends only its values. For statements that are long to plan and
 * sent often with the same text (a limited claim: planning was 40% of its time). A protocol-level
 * prepared statement, as pgdrain_insert_job is: Neon's pooler and Hyperdrive keep them.
 */
export async function rowsOfPrepared<T>(db: Db, prefix: string, query: SQL): Promise<T[]> {
  const built = dialect.sqlToQuery(query);
  return rowsOfResult<T>(
    await withStatementName(db, preparedName(prefix, built.sql), (name) =>
      db._.session.prepareQuery(built, undefined, name, false).execute(),
    ),
  );
}

// Named statements and transaction poolers. A protocol-level prepared statement lives in one server
// session; behind a pooler that gives each transaction any session (PgBouncer before 1.21 in
// transaction mode, Supavisor) the next statement meets a session that does not have it (26000) or
// has one of that name already (42P05). Neon's pooler and Hyperdrive keep them. Named statements are
// on until the sidecar finds such a pooler (db/pooler.ts, DATABASE_POOLER), or one of those two
// errors is met: then they are off for the process, and the statement is sent again unnamed when it
// was alone (it failed before it ran). Inside a transaction it cannot be: the transaction has failed
// and is the caller's to retry (NamedStatementsLost says so).
let namingStatements = true;

/** Sends every statement unnamed from now on (a transaction pooler in front of the database). */
export function stopNamingStatements(): void {
  namingStatements = false;
}

/** `run` with the statement's name, or unnamed ('') while statements are not named; see above. */
export async function withStatementName<T>(db: Db, name: string, run: (name: string) => Promise<T>): Promise<T> {
  if (!namingStatements) return run('');
  try {
    return await run(name);
  } catch (error) {
    if (!namedStatementLost(error)) throw error;
    stopNamingStatements();
    if (db instanceof PgTransaction) throw new NamedStatementsLost(error);
    return run('');
  }
}

/** 26000 (prepared statement does not exist) or 42P05 (already exists): the session changed under it. */
function namedStatementLost(error: unknown): boolean {
  for (let e = error as { code?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e)
    if (e.code === '26000' || e.code === '42P05') return true;
  return false;
}

/** A named statement failed inside a transaction because a pooler gave it another server session. */
export class NamedStatementsLost extends PgdrainError {
  override name = 'NamedStatementsLost';
  readonly code = 'named_statements_lost';
  constructor(cause: unknown) {
    super(
      'a prepared statement was not in the server session this transaction was given: a transaction-mode ' +
        'pooler stands in front of the database (set DATABASE_POOLER=transaction); pgdrain no longer names ' +
        'statements in this process, and the transaction may be retried',
      { cause },
    );
  }
}

/** A prepared statement's name: its prefix and a hash of its text. */
const preparedName = (prefix: string, text: string) => `${prefix}_${textHash(text)}`;

/** rowsOfPrepared()'s statement as a driver's query config (its name, text and values), for a
 * connection used without Drizzle. */
export function preparedQuery(prefix: string, query: SQL): { name: string; text: string; values: unknown[] } {
  const built = dialect.sqlToQuery(query);
  return { name: namingStatements ? preparedName(prefix, built.sql) : '', text: built.sql, values: built.params };
}

/** A connection checked out of a pool, as both drivers (pg, Neon: pg-pool) give it. */
interface PooledConnection {
  query(query: string | { name: string; text: string; values: unknown[] }): Promise<unknown>;
  /** `destroy`: close it instead of giving it back (the server rolls back what it had open). */
  release(destroy?: boolean | Error): void;
}

export interface ConnectionPool {
  connect(): Promise<PooledConnection>;
  idleCount: number;
}

/** The pool under a Drizzle database made on one (both drivers' drizzle() keep it as $client);
 * undefined for a transaction or a database on a single client. */
export function poolOf(db: Db): ConnectionPool | undefined {
  const client = (db as { $client?: unknown }).$client as Partial<ConnectionPool> | undefined;
  return typeof client?.connect === 'function' && typeof client.idleCount === 'number'
    ? (client as ConnectionPool)
    : undefined;
}

/** Rows of a driver's query result (a multi-statement text gives an array of them: the last). */
export const rowsOfDriverResult = <T>(result: unknown): T[] =>
  (Array.isArray(result) ? result.at(-1) : (result as { rows?: T[] })).rows ?? [];

/** A statement's text ($1, $2, … for its values) and its values, as drizzle sends them. */
export const builtQuery = (query: SQL): { sql: string; params: unknown[] } => dialect.sqlToQuery(query);

/** A value as an SQL literal of no type yet (PostgreSQL gives it the type its place wants): for
 * statements that take no bind parameters, such as EXPLAIN EXECUTE. Numbers, text, dates, arrays
 * of them, null. */
export function sqlLiteral(value: unknown): string {
  const quote = (text: string) => `'${text.replaceAll("'", "''")}'`;
  if (value === null || value === undefined) return 'NULL';
  if (value instanceof Date) return quote(value.toISOString());
  if (Array.isArray(value)) {
    const element = (e: unknown) =>
      e === null || e === undefined ? 'NULL' : `"${String(e).replace(/[\\"]/g, '\\$&')}"`;
    return quote(`{${value.map(element).join(',')}}`);
  }
  return quote(String(value));
}

/** 64 bits of FNV-1a over the text (two 32-bit lanes), as hex: names a statement by its text. */
export function textHash(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (a >>> 7);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

/** A row read by raw SQL (column names, driver values) as the query builder returns it: `columns`
 * maps each property to its column, whose own mapping turns the driver's value into the property's. */
export function fromDriverRow<T>(columns: Record<string, Column>, row: Record<string, unknown>): T {
  const entries = entriesOf(columns);
  const out: Record<string, unknown> = {};
  for (let i = 0; i < entries.length; i++) {
    const [key, column] = entries[i]!;
    const value = row[column.name];
    out[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
  }
  return out as T;
}

/** A column map's entries, listed once per map (a claim reads hundreds of rows through one). */
const columnEntries = new WeakMap<Record<string, Column>, (readonly [string, Column])[]>();
function entriesOf(columns: Record<string, Column>): (readonly [string, Column])[] {
  let entries = columnEntries.get(columns);
  if (!entries) {
    entries = Object.entries(columns);
    columnEntries.set(columns, entries);
  }
  return entries;
}
