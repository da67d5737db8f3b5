// one: a job with a dedupe key, with jobs to wait for (`after`) or enqueued by the kind's name
// alone (its kind's stored columns filled in), through pgdrain.enqueue_job()
// (src/sql/functions/enqueue_job.sql) — the one implementation of keyed, replacing and waiting
// enqueues, which pgdrain.enqueue() in SQL calls too. One statement, in the caller's transaction.
import { sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA } from '../../db/schema.ts';
import { type Db, rowsOf } from '../db.ts';
import { ENQUEUE_COLUMNS } from './columns.ts';
import { type EnqueuedJob, type NewJob, type ReturnedRow, UnknownDependencyError, toEnqueued } from './types.ts';

export async function enqueueOne(db: Db, job: NewJob): Promise<EnqueuedJob> {
  // Its arguments are named as the enqueue columns are, as given (NULL: not given).
  const given = ENQUEUE_COLUMNS.map((c) => sql`${sql.raw(c.name)} => ${c.value(job)}::${sql.raw(c.type)}`);
  const after = job.after && job.after.length > 0 ? sql`${sql.param(job.after)}::bigint[]` : sql`NULL::bigint[]`;
  const [row] = await rowsOf<ReturnedRow & { replaced: boolean; missing: string[] | null }>(
    db,
    sql`SELECT id, status, run_at_ms, inserted, replaced, missing::text[] AS missing
          FROM ${sql.raw(PGDRAIN_SCHEMA)}.enqueue_job(${sql.join(given, sql`, `)},
                 dedupe_mode => ${job.dedupeMode ?? 'keep'}::text, after => ${after},
                 from_kind => ${job.fromKind === true}::boolean)`,
  );
  if (!row) throw new Error('enqueue: pgdrain.enqueue_job() returned no row');
  if (row.missing) throw new UnknownDependencyError(row.missing.map(String));
  return row.replaced ? { ...toEnqueued(row), replaced: true } : toEnqueued(row);
}
