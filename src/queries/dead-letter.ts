// dead-letter: what a statement that makes jobs dead adds when their kind has a dead-letter kind
// (defineJob `deadLetter`, pgdrain.dead_letter_routes): in the same statement, one job of the
// dead-letter kind per dead job, whose payload is { job: { id, kind, payload, attempts, lastError,
// diedAt } }, and the dead job's dead_letter_id naming it. The dying statement (fail.ts, reap.ts)
// sets DEAD_LETTER_ID in its UPDATE, returns DEAD_LETTER_COLUMNS from its `ended` CTE, and appends
// DEAD_LETTERED after it; the jobs that die because one they wait for died get theirs in job-ended.ts.
// A kind without a route pays one primary-key probe per job that dies.
import { type SQL, sql } from 'drizzle-orm';
import { type Db, rowsOf } from './db.ts';
import { deadLetterRoutes, jobs } from '../db/schema.ts';

/** The dead-letter job's id, drawn from the jobs' own sequence, for `j` when `becomesDead` and its
 * kind has a route; else NULL. For the dying UPDATE's SET list (its table named `alias`). */
export const deadLetterIdFor = (becomesDead: SQL, alias: 'j' | 'c' = 'j'): SQL =>
  sql`dead_letter_id = CASE
    WHEN ${becomesDead} THEN
      (SELECT nextval('pgdrain.jobs_id_seq') FROM ${deadLetterRoutes} r WHERE r.kind = ${sql.raw(alias)}.kind) END`;

/** What the `ended` CTE returns beside ENDED_COLUMNS for DEAD_LETTERED. */
export const DEAD_LETTER_COLUMNS = sql`j.payload, j.attempts, j.last_error, j.finished_at, j.dead_letter_id`;

/** `, <name> AS (…)`: the dead-letter jobs of the dead rows of CTE `source` (which returns
 * `kind` and DEAD_LETTER_COLUMNS); returns their kinds. */
export function deadLettersOf(source: 'ended' | 'killed', name: string): SQL {
  return sql`,
    ${sql.raw(name)} AS (
      INSERT INTO ${jobs} (id, kind, payload, max_attempts, priority, keep_seconds)
      SELECT e.dead_letter_id, r.dead_letter,
             jsonb_build_object('job', jsonb_build_object('id', e.id::text, 'kind', e.kind, 'payload', e.payload,
               'attempts', e.attempts, 'lastError', e.last_error, 'diedAt', e.finished_at)),
             r.max_attempts, r.priority, r.keep_seconds
        FROM ${sql.raw(source)} e JOIN ${deadLetterRoutes} r ON r.kind = e.kind
       WHERE e.dead_letter_id IS NOT NULL
      RETURNING kind)`;
}

/** `, dead_lettered AS (…)`: the dead-letter jobs of the statement's own `ended` rows. */
export const DEAD_LETTERED = deadLettersOf('ended', 'dead_lettered');

/** A scalar: the dead-letter jobs' drainers notified (select it so that it is evaluated). */
export const DEAD_LETTERS_NOTIFIED = sql`(SELECT count(pg_notify('pgdrain_jobs', kind)) FROM (SELECT DISTINCT kind
  FROM dead_lettered) k)`;

/** The dead-letter job a dead job's death enqueued, if any (dead jobs stay in pgdrain.jobs). */
export async function deadLetterOf(db: Db, id: string): Promise<string | null> {
  const [row] = await rowsOf<{ dead_letter_id: string | null }>(
    db,
    sql`SELECT dead_letter_id::text AS dead_letter_id FROM ${jobs} WHERE id = ${id}::bigint`,
  );
  return row?.dead_letter_id ?? null;
}
