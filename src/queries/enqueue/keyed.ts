// keyed: one job with a dedupe key ('keep'): inserted, or — while a job holds the key — that job
// returned as it is, in one statement whose RETURNING notifies for an inserted job due now.
import { type SQL, sql } from 'drizzle-orm';
import { jobs } from '../../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from '../db.ts';
import { columnNames, valuesOf } from './columns.ts';
import { type EnqueuedJob, type NewJob, type ReturnedRow, toEnqueued } from './types.ts';

/** INSERT of one job with a dedupe key, nothing when the key is taken; RETURNING what enqueue reports. */
export function insertKeyed(job: NewJob): SQL {
  return sql`INSERT INTO ${jobs} (${columnNames()}) VALUES (${valuesOf(job)})
             ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
             RETURNING id, status, run_at, kind`;
}

export async function enqueueKeyed(db: Db, job: NewJob): Promise<EnqueuedJob> {
  // A concurrent enqueue of the same key can commit between our INSERT's conflict check and our
  // snapshot, leaving neither branch with a row; trying again then finds the committed job.
  for (let attempt = 0; attempt < 5; attempt++) {
    const [row] = await rowsOf<ReturnedRow>(
      db,
      sql`WITH ins AS (${insertKeyed(job)})
          SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted,
                 CASE WHEN run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END AS notified
            FROM ins
          UNION ALL
          SELECT id, status, extract(epoch from run_at) * 1000, false, NULL
            FROM ${jobs}
           WHERE dedupe_key = ${job.dedupeKey}::text AND NOT EXISTS (SELECT 1 FROM ins)`,
    );
    if (row) return toEnqueued(row);
  }
  throw new Error(`enqueue: could not insert or find the job with dedupe key ${JSON.stringify(job.dedupeKey)}`);
}
