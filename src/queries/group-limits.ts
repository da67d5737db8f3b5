// group-limits: limits per group key from data (pgdrain.group_limits; pgdrain.set_group_limits() in SQL):
// set or remove one key's, and list a kind's for /stats, the dashboard and the CLI. The limited
// claim (claim-limited.ts) reads them in its own statement.
import { sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA, groupLimits } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

export interface GroupLimitsRow {
  groupKey: string;
  concurrency: number | null;
  rateLimit: { limit: number; periodSeconds: number } | null;
  updatedAt: Date;
}

/** pgdrain.set_group_limits(): sets the key's limits (both null: removes them). True when set. */
export async function writeGroupLimits(
  db: Db,
  kind: string,
  groupKey: string,
  concurrency: number | null,
  rateLimit: { limit: number; periodSeconds: number } | null,
): Promise<boolean> {
  const [row] = await rowsOf<{ set: boolean }>(
    db,
    sql`SELECT ${sql.raw(PGDRAIN_SCHEMA)}.set_group_limits(${kind}, ${groupKey}, ${concurrency}::int,
      ${rateLimit?.limit ?? null}::int,
          ${rateLimit?.periodSeconds ?? null}::float8) AS set`,
  );
  return row?.set === true;
}

/** Removes the key's limits (back to its kind's); true when it had some. */
export async function deleteGroupLimits(db: Db, kind: string, groupKey: string): Promise<boolean> {
  const rows = await rowsOf(
    db,
    sql`DELETE FROM ${groupLimits} WHERE kind = ${kind} AND group_key = ${groupKey} RETURNING 1`,
  );
  return rows.length > 0;
}

/** Each kind's keys with limits of their own (`kinds`: these; undefined: every kind that has any):
 * how many, and the first `limit` by key. */
export async function listGroupLimits(
  db: Db,
  kinds?: readonly string[],
  limit = 100,
): Promise<Record<string, { count: number; keys: GroupLimitsRow[] }>> {
  if (kinds?.length === 0) return {};
  const from = kinds
    ? sql`unnest(${sql.param(kinds)}::text[]) AS k(kind)`
    : sql`(SELECT DISTINCT kind FROM ${groupLimits}) AS k`;
  const rows = await rowsOf<{
    kind: string;
    n: number;
    group_key: string | null;
    concurrency: number | null;
    rate_limit: number | null;
    rate_period_seconds: number | null;
    updated_at: Date | string | null;
  }>(
    db,
    sql`SELECT k.kind, (SELECT count(*) FROM ${groupLimits} c WHERE c.kind = k.kind)::int AS n, g.group_key,
      g.concurrency, g.rate_limit, g.rate_period_seconds, g.updated_at
          FROM ${from}
          LEFT JOIN LATERAL (SELECT * FROM ${groupLimits} l WHERE l.kind = k.kind ORDER BY l.group_key LIMIT ${limit})
            g ON true
         ORDER BY k.kind, g.group_key`,
  );
  const out: Record<string, { count: number; keys: GroupLimitsRow[] }> = {};
  for (const r of rows) {
    const entry = (out[r.kind] ??= { count: Number(r.n), keys: [] });
    if (r.group_key === null) continue;
    entry.keys.push({
      groupKey: r.group_key,
      concurrency: r.concurrency,
      rateLimit: r.rate_limit === null ? null : { limit: r.rate_limit, periodSeconds: Number(r.rate_period_seconds) },
      updatedAt: new Date(r.updated_at!),
    });
  }
  return out;
}
