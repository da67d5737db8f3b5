// dead-letter: a statement that makes jobs dead sends their dead letters in the same statement, when
// their kind has a dead-letter kind (defineJob `deadLetter`): pgdrain.send_dead_letters()
// (src/sql/functions/send_dead_letters.sql, the one implementation; the jobs that die because one
// they wait for died get theirs from pgdrain.after_jobs_ended()). The dying statement (fail.ts,
// reap.ts) returns `status` from its `ended` CTE, appends DEAD_LETTERED after it and selects
// DEAD_LETTER_KINDS, which is what makes the function run. A kind without a route pays one
// primary-key probe per job that dies.
import { type SQL, sql } from 'drizzle-orm';
import { type Db, rowsOf } from './db.ts';
import { PGDRAIN_SCHEMA, deadLetterRoutes, jobs } from '../db/schema.ts';

/** `, dead_lettered AS (…)`: the dead letters of the statement's own `ended` rows. */
export const DEAD_LETTERED: SQL = sql`,
    dead_lettered AS (
      SELECT ${sql.raw(PGDRAIN_SCHEMA)}.send_dead_letters(array_agg(e.id)) AS kinds FROM ended e
       WHERE e.status = 'dead' AND EXISTS (SELECT 1 FROM ${deadLetterRoutes} r WHERE r.kind = e.kind)
      HAVING count(*) > 0)`;

/** The dead letters' kinds (select it so that they are sent). */
export const DEAD_LETTER_KINDS = sql`(SELECT unnest(kinds) AS kind FROM dead_lettered)`;

/** The dead-letter job a dead job's death enqueued, if any (dead jobs stay in pgdrain.jobs). */
export async function deadLetterOf(db: Db, id: string): Promise<string | null> {
  const [row] = await rowsOf<{ dead_letter_id: string | null }>(
    db,
    sql`SELECT dead_letter_id::text AS dead_letter_id FROM ${jobs} WHERE id = ${id}::bigint`,
  );
  return row?.dead_letter_id ?? null;
}
