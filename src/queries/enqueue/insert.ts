// insert: one job with no dedupe key and nothing to wait for — every API enqueue — as one prepared
// statement whose RETURNING also sends the notification (for a job due now), delivered at commit.
import { getTableColumns, sql } from 'drizzle-orm';
import { jobs } from '../../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, withStatementName } from '../db.ts';
import { ENQUEUE_COLUMNS, columnValue } from './columns.ts';
import type { EnqueuedJob, NewJob } from './types.ts';

export async function insertJob(db: Db, job: NewJob): Promise<EnqueuedJob> {
  const params = Object.fromEntries(ENQUEUE_COLUMNS.map((c) => [c.name, c.value(job)]));
  const [row] = await withStatementName(db, INSERT_STATEMENT, (name) => preparedInsert(db, name).execute(params));
  if (!row) throw new Error('enqueue: the INSERT returned no row');
  return { id: String(row.id), status: row.status, runAt: row.runAt, deduplicated: false };
}

/** The statement's name while statements are named (queries/db.ts: not behind a transaction pooler). */
const INSERT_STATEMENT = 'pgdrain_insert_job';
const prepared = { named: new WeakMap<Db, Prepared>(), unnamed: new WeakMap<Db, Prepared>() };
type Prepared = ReturnType<typeof prepareInsert>;
function preparedInsert(db: Db, name: string) {
  const cache = name ? prepared.named : prepared.unnamed;
  let statement = cache.get(db);
  if (!statement) cache.set(db, (statement = prepareInsert(db, name)));
  return statement;
}

/** The table's property for each enqueue column, as the query builder wants them. */
const PROPERTY = new Map(Object.entries(getTableColumns(jobs)).map(([property, column]) => [column.name, property]));

function prepareInsert(db: Db, name: string) {
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
    .prepare(name);
}
