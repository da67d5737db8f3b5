// What follows, in the same statement, when jobs end — whichever statement ended them (complete,
// fail, release, reap, delete): pgdrain.after_jobs_ended() (src/sql/functions/after_jobs_ended.sql,
// the one implementation; pgdrain.cancel() calls it too) — jobs waiting for them counted down or
// killed with their dead letters, workflows parked on them woken, watchers told. The statement gives
// its ended rows a CTE named `ended` (id, kind, status — the new one —, watched_until,
// has_dependents), appends FOLLOWED after it and selects ENDED_FOLLOWED, which is what makes the
// function run. Only ended jobs that have dependents or watchers are passed: the plain settlement
// calls nothing.
import { type SQL, sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA } from '../db/schema.ts';

/** The RETURNING list a statement that ends jobs gives its `ended` CTE (`status` computed by it). */
export const ENDED_COLUMNS = sql`j.id, j.kind, j.watched_until, j.has_dependents`;

/** `, followed AS (…)`, to append after `ended`. `gone`: the rows are deleted (a watcher's answer
 * goes to pgdrain.finished_jobs). */
export function afterJobsEnded(options: { gone: boolean }): SQL {
  return sql`,
    followed AS (
      SELECT ${sql.raw(PGDRAIN_SCHEMA)}.after_jobs_ended(array_agg(id), array_agg(kind), array_agg(status),
               array_agg(coalesce(watched_until > now(), false)), ${options.gone}) AS kinds
        FROM ended WHERE has_dependents OR watched_until > now() HAVING count(*) > 0)`;
}

/** Select this from the statement's main query: it runs what follows the ends. */
export const ENDED_FOLLOWED = sql`coalesce(cardinality((SELECT kinds FROM followed)), 0) AS pgdrain_followed`;

/** The kinds of the jobs that what follows made pending (a drain may claim them at once). */
export const RELEASED_KINDS = sql`(SELECT unnest(kinds) AS kind FROM followed)`;
