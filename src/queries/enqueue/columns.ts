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
  /** For a job enqueued by the kind's name (fromKind), what fills the column when the enqueue
   * says nothing, before the fallback: an SQL expression over the kind's pgdrain.kinds row `k`. */
  fromKind?: string;
}

const option = <K extends keyof NewJob>(
  name: string,
  type: string,
  key: K,
  fallback?: string,
  fromKind?: string,
): Column => ({
  name,
  type,
  fallback,
  fromKind,
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
  option('max_attempts', 'int', 'maxAttempts', String(JOB_DEFAULTS.maxAttempts), 'k.max_attempts'),
  option('dedupe_key', 'text', 'dedupeKey'),
  option('visibility_seconds', 'int', 'visibilityTimeoutSeconds', undefined, 'k.visibility_seconds'),
  option('priority', 'int', 'priority', String(JOB_DEFAULTS.priority), 'k.priority'),
  option('group_key', 'text', 'groupKey'),
  option('timeout_ms', 'int', 'timeoutMs'),
  option('keep_seconds', 'int', 'keepSeconds', undefined, 'k.keep_seconds'),
  option('traceparent', 'text', 'traceparent'),
  // The first version is the kind's name alone (claim.sql): no version is written for it.
  option('version', 'int', 'version', undefined, 'nullif(k.version, 1)'),
];

/** The column list: `kind, payload, run_at, …`. */
export const columnNames = (columns: readonly Column[] = ENQUEUE_COLUMNS): SQL =>
  sql.raw(columns.map((c) => c.name).join(', '));

/** One value of a column, cast, with its fallback when the job says nothing; `kindRow`: the
 * statement joins the kind's pgdrain.kinds row as `k` (jobs enqueued by name), whose value comes
 * before the fallback. */
export function columnValue(column: Column, value: SQL, kindRow = false): SQL {
  const cast = sql`${value}::${sql.raw(column.type)}`;
  const fills = [kindRow ? column.fromKind : undefined, column.fallback].filter((f) => f !== undefined);
  return fills.length > 0 ? sql`coalesce(${cast}, ${sql.raw(fills.join(', '))})` : cast;
}

/** A job's values for `VALUES (…)`, in ENQUEUE_COLUMNS' order. */
export const valuesOf = (job: NewJob): SQL =>
  sql.join(
    ENQUEUE_COLUMNS.map((c) => columnValue(c, sql`${c.value(job)}`)),
    sql`, `,
  );

export type { Column };
