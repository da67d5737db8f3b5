// replace: one job with a dedupe key in 'replace' mode (debounce), statement by statement in one
// transaction (each sees the last): a pending job of the kind with the key takes the new payload
// and run_at; else the key's running or dead job gives up the key (it runs on, or stays dead,
// untouched otherwise) and the job is inserted. A key held by another kind's job is left alone, as
// 'keep' would. pgdrain.enqueue() in SQL does the same.
import { sql } from 'drizzle-orm';
import { jobs } from '../../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from '../db.ts';
import { insertKeyed } from './keyed.ts';
import { type EnqueuedJob, type NewJob, type ReturnedRow, toEnqueued } from './types.ts';

export async function enqueueReplacing(tx: Db, job: NewJob): Promise<EnqueuedJob> {
  const key = job.dedupeKey!;
  const payload = JSON.stringify(job.payload ?? null);
  const runAt = job.runAt?.toISOString() ?? null;
  const notify = sql`CASE WHEN run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END`;
  for (let attempt = 0; attempt < 5; attempt++) {
    const [replaced] = await rowsOf<ReturnedRow>(
      tx,
      sql`UPDATE ${jobs} SET payload = ${payload}::jsonb, run_at = coalesce(${runAt}::timestamptz, now())
           WHERE dedupe_key = ${key}::text AND kind = ${job.kind} AND status = 'pending'
       RETURNING id, status, extract(epoch from run_at) * 1000 AS run_at_ms, false AS inserted, ${notify} AS notified`,
    );
    if (replaced) return { ...toEnqueued(replaced), replaced: true };
    await tx.execute(
      sql`UPDATE ${jobs} SET dedupe_key = NULL WHERE dedupe_key = ${key}::text AND kind = ${job.kind}
        AND status IN ('running', 'dead')`,
    );
    const [inserted] = await rowsOf<ReturnedRow>(
      tx,
      sql`WITH ins AS (${insertKeyed(job)})
          SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted, ${notify} AS notified
            FROM ins`,
    );
    if (inserted) return toEnqueued(inserted);
    const [holder] = await rowsOf<ReturnedRow & { kind: string }>(
      tx,
      sql`SELECT id, status, kind, extract(epoch from run_at) * 1000 AS run_at_ms, false AS inserted FROM ${jobs}
        WHERE dedupe_key = ${key}::text`,
    );
    if (holder && holder.kind !== job.kind) return toEnqueued(holder);
  }
  throw new Error(`enqueue: could not replace or insert the job with dedupe key ${JSON.stringify(key)}`);
}
