// kinds: the kinds the drainers define, as the database knows them (pgdrain.kinds): written by every
// drainer when it starts (runtime/core.ts registerKinds) and by `pgdrain migrate --jobs`, read by an
// enqueue by the kind's name alone (pgdrain.enqueue_job(), from_kind) and by GET /kinds, `pgdrain
// kinds` and the dashboard. The newest write wins.
import { sql } from 'drizzle-orm';
import { kinds } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

/** A kind as a drainer defines it. */
export interface KindRow {
  kind: string;
  /** The highest version registered. */
  version: number;
  /** What a typed enqueue of it writes (an enqueue by its name fills these in). */
  columns: { maxAttempts: number; priority?: number; visibilitySeconds?: number; keepSeconds?: number };
  /** Its options (what an enqueue by name fills in, and what readers are shown). */
  options: Record<string, unknown>;
  /** A hash of each registered version's code, by version. */
  code: Record<string, string>;
}

/** A stored kind: who wrote it, and when. */
export interface StoredKind extends KindRow {
  writtenBy: string;
  writtenAt: Date;
}

/** Writes `rows` (one statement), each replacing what was stored; returns what each replaced (for
 * the kinds it changed: another drainer's definition, or this one's before a deploy). */
export async function writeKinds(
  db: Db,
  rows: readonly KindRow[],
  writtenBy: string,
): Promise<Map<string, StoredKind>> {
  if (rows.length === 0) return new Map();
  const sorted = [...rows].sort((a, b) => (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0));
  const replaced = await rowsOf<Record<string, unknown>>(
    db,
    sql`WITH given AS (
          SELECT * FROM unnest(${sql.param(sorted.map((r) => r.kind))}::text[],
                               ${sql.param(sorted.map((r) => r.version))}::int[],
                               ${sql.param(sorted.map((r) => r.columns.maxAttempts))}::int[],
                               ${sql.param(sorted.map((r) => r.columns.priority ?? null))}::int[],
                               ${sql.param(sorted.map((r) => r.columns.visibilitySeconds ?? null))}::int[],
                               ${sql.param(sorted.map((r) => r.columns.keepSeconds ?? null))}::int[],
                               ${sql.param(sorted.map((r) => JSON.stringify(r.options)))}::jsonb[],
                               ${sql.param(sorted.map((r) => JSON.stringify(r.code)))}::jsonb[])
            AS g(kind, version, max_attempts, priority, visibility_seconds, keep_seconds, options, code)),
        before AS MATERIALIZED (
          SELECT k.* FROM ${kinds} k JOIN given g ON g.kind = k.kind
           WHERE (k.version, k.options, k.code) IS DISTINCT FROM (g.version, g.options, g.code)),
        written AS (
          INSERT INTO ${kinds} AS k (kind, version, max_attempts, priority, visibility_seconds, keep_seconds, options,
                                     code, written_by, written_at)
          SELECT g.*, ${writtenBy}, now() FROM given g ORDER BY kind
          ON CONFLICT (kind) DO UPDATE SET version = excluded.version, max_attempts = excluded.max_attempts,
            priority = excluded.priority, visibility_seconds = excluded.visibility_seconds,
            keep_seconds = excluded.keep_seconds, options = excluded.options, code = excluded.code,
            written_by = excluded.written_by, written_at = excluded.written_at)
        SELECT ${STORED} FROM before`,
  );
  return new Map(replaced.map((r) => [String(r.kind), storedKind(r)]));
}

/** Every stored kind, by name. */
export async function listKinds(db: Db): Promise<StoredKind[]> {
  const rows = await rowsOf<Record<string, unknown>>(db, sql`SELECT ${STORED} FROM ${kinds} ORDER BY kind`);
  return rows.map(storedKind);
}

const STORED = sql.raw(
  'kind, version, max_attempts, priority, visibility_seconds, keep_seconds, options::text AS options, ' +
    'code::text AS code, written_by, written_at',
);

const optionalNumber = (v: unknown) => (v === null || v === undefined ? undefined : Number(v));

function storedKind(r: Record<string, unknown>): StoredKind {
  const columns: KindRow['columns'] = { maxAttempts: Number(r.max_attempts) };
  for (const [key, column] of [
    ['priority', 'priority'],
    ['visibilitySeconds', 'visibility_seconds'],
    ['keepSeconds', 'keep_seconds'],
  ] as const) {
    const value = optionalNumber(r[column]);
    if (value !== undefined) columns[key] = value;
  }
  return {
    kind: String(r.kind),
    version: Number(r.version),
    columns,
    options: JSON.parse(String(r.options)) as Record<string, unknown>,
    code: JSON.parse(String(r.code)) as Record<string, string>,
    writtenBy: String(r.written_by),
    writtenAt: r.written_at instanceof Date ? r.written_at : new Date(String(r.written_at)),
  };
}
