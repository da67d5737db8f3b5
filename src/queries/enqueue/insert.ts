// insert: one job with no dedupe key and nothing to wait for — every API enqueue — as one prepared
// statement whose RETURNING also sends the notification (for a job due now), delivered at commit.
import { getTableColumns, sql } from 'drizzle-orm';
import { jobs } from '../../db/schema.ts';
import { type Db, NOTIFY_CHANNEL } from '../db.ts';
import { ENQUEUE_COLUMNS, columnValue } from './columns.ts';
import type { EnqueuedJob, NewJob } from './types.ts';

export async function insertJob(db: Db, job: NewJob): Promise<EnqueuedJob> {
  const params = Object.fromEntries(ENQUEUE_COLUMNS.map((c) => [c.name, c.value(job)]));
  const [row] = await preparedInsert(db).execute(params);
  if (!row) throw new Error('enqueue: the INSERT returned no row');
  return { id: String(row.id), status: row.status, runAt: row.runAt, deduplicated: false };
}

const prepared = new WeakMap<Db, ReturnType<typeof prepareInsert>>();
function preparedInsert(db: Db) {
  let statement = prepared.get(db);
  if (!statement) prepared.set(db, (statement = prepareInsert(db)));
  return statement;
}

/** The table's property for each enqueue column, as the query builder wants them. */
const PROPERTY = new Map(Object.entries(getTableColumns(jobs)).map(([property, column]) => [column.name, property]));

function prepareInsert(db: Db) {
  const values = Object.fromEntries(
    ENQUEUE_COLUMNS.map((c) => [PROPERTY.get(c.name)!, columnValue(c, sql`${sql.placeholder(c.name)}`)]),
  );
  return db
    .insert(jobs)
    .values(values as unknown as typeof jobs.$inferInsert)
    .returning({
      id: jobs.id,
      status: jobs.status,
      runAt: jobs.runAt,
      notified: sql`CASE WHEN ${jobs.runAt} <= now() THEN pg_notify(${NOTIFY_CHANNEL}, ${jobs.kind}) END`,
    })
    .prepare('pgdrain_insert_job');
}
