// What the suites share beyond time (time.ts): the harness a driver gives the conformance suites,
// LISTEN on its connections, and two things every suite does to the database — read a job
// (wherever it is: the live table or the history) and empty the queue between tests. Runs in Node
// and inside workerd alike (no Node module here).
import type { OpenTransactionConnection } from '../../src/drain/index.ts';
import type { Db } from '../../src/queries/index.ts';

export interface Listener {
  /** Payloads received on the channel so far. */
  received: string[];
  close(): Promise<void>;
}

/** A driver under test: the runtime's own database (its QueueDatabase: `db`, `transactions`), and
 * what the tests need beside it. */
export interface Harness {
  db: Db;
  /** Raw SQL for arranging and asserting; returns rows. */
  query<T = Record<string, any>>(text: string, values?: unknown[]): Promise<T[]>;
  /** A database on connections of its own, like a separate worker process would have. */
  connect(): Promise<Db>;
  listen(channel: string): Promise<Listener>;
  /** Connections for transactional handlers, as each runtime opens them (destroyable). */
  transactions: OpenTransactionConnection;
  close(): Promise<void>;
}

/** What LISTEN needs of a driver's client (node-postgres's and Neon's both fit). */
export interface NotifyingClient {
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (n: { channel: string; payload?: string }) => void): unknown;
  end(): Promise<void>;
}

/** LISTENs on `channel` with a connected client of the harness's driver, collecting payloads. */
export async function listenOn(client: NotifyingClient, channel: string): Promise<Listener> {
  const received: string[] = [];
  client.on('notification', (n) => {
    if (n.channel === channel) received.push(n.payload ?? '');
  });
  await client.query(`LISTEN ${channel}`);
  return { received, close: () => client.end() };
}

/** What runs SQL and returns rows: a harness, a TestDatabase (support/database.ts). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<object[]>;
}

/** Every table that holds the queue's state (not the schema's own bookkeeping). A new table of
 * state goes here, and every suite that resets the queue empties it too. */
export const QUEUE_STATE_TABLES = [
  'pgdrain.jobs',
  'pgdrain.job_history',
  'pgdrain.job_dependencies',
  'pgdrain.finished_jobs',
  'pgdrain.job_counts',
  'pgdrain.job_totals',
  'pgdrain.paused_kinds',
  'pgdrain.rate_starts',
  'pgdrain.group_limits',
  'pgdrain.fair_turns',
  'pgdrain.workflow_steps',
  'pgdrain.events',
  'pgdrain.cancel_triggers',
] as const;

/** Empties the queue's state (QUEUE_STATE_TABLES) and the suite's own tables `also`, in one
 * statement. Kinds, schedules, subscriptions and dead-letter routes are the registry's, written at start:
 * a suite that changes them resets them itself. */
export async function resetQueue(db: Queryable, also: readonly string[] = []): Promise<void> {
  await db.query(`TRUNCATE ${[...QUEUE_STATE_TABLES, ...also].join(', ')}`);
}

/** One job's row (`columns` of pgdrain.jobs_and_history: live or kept in the history), or undefined. */
export async function jobRow<T = Record<string, any>>(
  db: Queryable,
  id: string,
  columns = '*',
): Promise<T | undefined> {
  return (await db.query(`SELECT ${columns} FROM pgdrain.jobs_and_history WHERE id = $1`, [id]))[0] as T | undefined;
}
