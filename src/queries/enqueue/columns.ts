// The columns an enqueue writes, once: every enqueue statement (insert, keyed, replace, waiting,
// bulk) builds its column list and its values from this table, so an option is a line here.
import { type SQL, sql } from 'drizzle-orm';
import { JOB_DEFAULTS } from '../../db/schema.ts';
import type { NewJob } from './types.ts';

interface Column {
  /** The column's name in pgdrain.jobs. */
  name: string;
  /** Its SQL type, for the cast of the value sent. */
  type: string;
  /** The job's value for it (null: the column's default, or the `fallback` below). */
  value: (job: NewJob) => unknown;
  /** What NULL stands for in this column when the enqueue says nothing (an SQL expression). */
  fallback?: string;
  /** Whether the enqueue said something for this column (bulk statements send only those). */
  given: (job: NewJob) => boolean;
}

const option = <K extends keyof NewJob>(name: string, type: string, key: K, fallback?: string): Column => ({
  name,
  type,
  fallback,
  value: (job) => job[key] ?? null,
  given: (job) => job[key] !== undefined,
});

/** In the order of the INSERTs' column lists. */
export const ENQUEUE_COLUMNS: readonly Column[] = [
  { name: 'kind', type: 'text', value: (job) => job.kind, given: () => true },
  { name: 'payload', type: 'jsonb', value: (job) => JSON.stringify(job.payload ?? null), given: () => true },
  {
    name: 'run_at',
    type: 'timestamptz',
    value: (job) => job.runAt?.toISOString() ?? null,
    fallback: 'now()',
    given: (job) => job.runAt !== undefined,
  },
  option('max_attempts', 'int', 'maxAttempts', String(JOB_DEFAULTS.maxAttempts)),
  option('dedupe_key', 'text', 'dedupeKey'),
  {
    name: 'visibility_seconds',
    type: 'int',
    value: (job) => job.visibilityTimeoutSeconds ?? null,
    given: (job) => job.visibilityTimeoutSeconds !== undefined,
  },
  option('priority', 'int', 'priority', String(JOB_DEFAULTS.priority)),
  option('group_key', 'text', 'groupKey'),
  option('timeout_ms', 'int', 'timeoutMs'),
  option('keep_seconds', 'int', 'keepSeconds'),
  option('traceparent', 'text', 'traceparent'),
  option('version', 'int', 'version'),
];

/** The column list: `kind, payload, run_at, …`. */
export const columnNames = (columns: readonly Column[] = ENQUEUE_COLUMNS): SQL =>
  sql.raw(columns.map((c) => c.name).join(', '));

/** One value of a column, cast, with its fallback when the job says nothing. */
export function columnValue(column: Column, value: SQL): SQL {
  const cast = sql`${value}::${sql.raw(column.type)}`;
  return column.fallback ? sql`coalesce(${cast}, ${sql.raw(column.fallback)})` : cast;
}

/** A job's values for `VALUES (…)`, in ENQUEUE_COLUMNS' order. */
export const valuesOf = (job: NewJob): SQL =>
  sql.join(
    ENQUEUE_COLUMNS.map((c) => columnValue(c, sql`${c.value(job)}`)),
    sql`, `,
  );

export type { Column };
