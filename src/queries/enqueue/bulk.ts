// bulk: many jobs in one statement per chunk of ENQUEUE_CHUNK — a jsonb array of payloads expanded
// on the server, not a loop of INSERTs — and one pg_notify per distinct kind with a job ready now.
// Columns no job of the chunk sets travel as constants, the others as one array each.
import { type SQL, sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA, jobs, kinds } from '../../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from '../db.ts';
import { type Column, ENQUEUE_COLUMNS, columnNames, columnValue } from './columns.ts';
import type { EnqueuedJob, NewJob } from './types.ts';

/** Rows per statement of enqueueMany: large enough to amortise the round trip, small enough to
 * keep each statement's parameters and memory modest (the benchmark page has the measurements). */
export const ENQUEUE_CHUNK = 10_000;

// A literal, resolved to the sequence's oid once at parse time: sent as a parameter, the cast to
// regclass is evaluated on every row (about 0.1 µs each: 5 ms of a 50k enqueue, measured).
const JOBS_ID_SEQUENCE = sql.raw(`'${PGDRAIN_SCHEMA}.jobs_id_seq'::regclass`);

/** One chunk's INSERT, built; run() sends it and reads the jobs back in input order. */
export function chunkStatement(chunk: readonly NewJob[]): { run(db: Db): Promise<EnqueuedJob[]> } {
  if (chunk.length === 0) return { run: async () => [] };
  const { given, oneKind, readyKinds } = survey(chunk);
  const keyed = given.has('dedupe_key');
  // One jsonb array for the payloads (a single parse on the server, a single JSON.stringify here).
  const payloads = JSON.stringify(chunk.map((j) => j.payload ?? null));
  // Jobs enqueued by the kind's name take what they leave unset from the kind's row (`k`).
  const byName = chunk.filter((j) => j.fromKind).length;
  const value = (c: Column): SQL => {
    if (c.name === 'payload') return sql`payload`;
    if (c.name === 'kind' && oneKind) return sql`${chunk[0]!.kind}::text`;
    if (c.name !== 'kind' && !given.has(c.name)) return columnValue(c, sql`NULL`, byName > 0);
    return columnValue(c, sql`(${sql.param(chunk.map(c.value))}::${sql.raw(c.type)}[])[ord]`, byName > 0);
  };
  const kindRows =
    byName === 0
      ? sql``
      : sql`LEFT JOIN ${kinds} k ON k.kind = ${value(ENQUEUE_COLUMNS[0]!)}${
          byName === chunk.length ? sql`` : sql` AND (${sql.param(chunk.map((j) => j.fromKind === true))}::bool[])[ord]`
        }`;
  // ids come from nextval in input order (the ORDER BY runs below the projection), so the inserted
  // ids in ascending order are the inserted inputs in order. They usually form one contiguous
  // range; only when a concurrent enqueue interleaved does the full list travel back.
  const statement = sql`WITH input AS (
          SELECT value AS payload, ordinality AS ord FROM jsonb_array_elements(${payloads}::jsonb) WITH ORDINALITY),
        ins AS (
          INSERT INTO ${jobs} (id, ${columnNames()})
          SELECT nextval(${JOBS_ID_SEQUENCE}), ${sql.join(ENQUEUE_COLUMNS.map(value), sql`, `)}
            FROM input ${kindRows} ORDER BY ord
          ${keyed ? sql`ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING` : sql``}
          RETURNING id, dedupe_key),
        range AS (SELECT min(id) AS lo, max(id) AS hi, count(*)::int AS n FROM ins)
        SELECT lo::text, hi::text, n,
               CASE WHEN hi - lo + 1 <> n THEN (SELECT array_agg(id ORDER BY id) FROM ins) END AS ids,
               ${
                 keyed
                   ? sql`(SELECT array_agg(id ORDER BY id) FROM ins
                 WHERE dedupe_key IS NOT NULL)`
                   : sql`NULL::bigint[]`
               } AS keyed_ids,
               ${
                 keyed
                   ? sql`(SELECT array_agg(dedupe_key ORDER BY id) FROM ins
                 WHERE dedupe_key IS NOT NULL)`
                   : sql`NULL::text[]`
               } AS keys,
               (extract(epoch from now()) * 1000)::float8 AS now_ms,
               (SELECT count(pg_notify(${NOTIFY_CHANNEL}, k)) FROM unnest(${sql.param(readyKinds)}::text[]) AS k) AS
                 notified
          FROM range`;
  return {
    async run(db) {
      const [row] = await rowsOf<{
        lo: string | null;
        hi: string | null;
        n: number;
        ids: string[] | null;
        keyed_ids: string[] | null;
        keys: string[] | null;
        now_ms: number;
      }>(db, statement);
      const ids = row?.ids?.map(String) ?? idRange(row?.lo ?? null, row?.hi ?? null);
      const statementNow = new Date(Number(row?.now_ms ?? Date.now()));
      if (!keyed) {
        // Every input was inserted, in order: the common case pays for nothing else.
        if (ids.length !== chunk.length) throw new Error('enqueueMany: fewer rows came back than were inserted');
        return chunk.map((job, i) => ({
          id: ids[i]!,
          status: 'pending',
          runAt: job.runAt ?? statementNow,
          deduplicated: false,
        }));
      }
      return keyedResults(db, chunk, ids, row?.keyed_ids ?? [], row?.keys ?? [], statementNow);
    },
  };
}

/** Each input of a chunk with dedupe keys: the job inserted for it, or the one that held its key
 * (an earlier input of the chunk, or a job already in the table). */
async function keyedResults(
  db: Db,
  chunk: readonly NewJob[],
  ids: readonly string[],
  keyedIds: readonly string[],
  keys: readonly string[],
  statementNow: Date,
): Promise<EnqueuedJob[]> {
  const keyOf = new Map<string, string>();
  for (const [i, id] of keyedIds.entries()) keyOf.set(String(id), String(keys[i]));
  const inserted = (job: NewJob, id: string): EnqueuedJob => ({
    id,
    status: 'pending',
    runAt: job.runAt ?? statementNow,
    deduplicated: false,
  });
  const byKey = new Map<string, string>();
  const plainIds: string[] = [];
  for (const id of ids) {
    const k = keyOf.get(id);
    if (k === undefined) plainIds.push(id);
    else byKey.set(k, id);
  }
  const missingKeys = [
    ...new Set(chunk.map((j) => j.dedupeKey).filter((k): k is string => k !== undefined && !byKey.has(k))),
  ];
  const existing = missingKeys.length === 0 ? new Map<string, EnqueuedJob>() : await findByKeys(db, missingKeys);
  const seen = new Set<string>();
  let next = 0;
  return chunk.map((job) => {
    const k = job.dedupeKey;
    if (k === undefined) {
      const id = plainIds[next++];
      if (id === undefined) throw new Error('enqueueMany: fewer rows came back than were inserted');
      return inserted(job, id);
    }
    const id = byKey.get(k);
    if (id !== undefined && !seen.has(k)) {
      seen.add(k);
      return inserted(job, id);
    }
    const found = id !== undefined ? inserted(chunk.find((j) => j.dedupeKey === k) ?? job, id) : existing.get(k);
    if (!found) throw new Error(`enqueueMany: the job with dedupe key ${JSON.stringify(k)} vanished while enqueueing`);
    return { ...found, deduplicated: true };
  });
}

/** One pass over a chunk: which columns some job sets (the others travel as constants), whether
 * it is all one kind, and the kinds with a job ready now (only those are announced; delayed jobs
 * are found by the poll when due). */
function survey(chunk: readonly NewJob[]) {
  const optional = ENQUEUE_COLUMNS.filter((c) => c.name !== 'kind' && c.name !== 'payload');
  const given = new Set<string>();
  const readyKinds = new Set<string>();
  const nowMs = Date.now();
  const kind = chunk[0]?.kind;
  let oneKind = true;
  for (const job of chunk) {
    if (job.kind !== kind) oneKind = false;
    if (given.size < optional.length) for (const c of optional) if (c.given(job)) given.add(c.name);
    if (!job.runAt || job.runAt.getTime() <= nowMs) readyKinds.add(job.kind);
  }
  return { given, oneKind, readyKinds: [...readyKinds] };
}

/** "lo".."hi" as decimal strings; ids stay exact beyond 2^53. */
function idRange(lo: string | null, hi: string | null): string[] {
  if (lo === null || hi === null) return [];
  const out: string[] = [];
  if (Number(hi) <= Number.MAX_SAFE_INTEGER) {
    for (let id = Number(lo); id <= Number(hi); id++) out.push(String(id));
  } else {
    for (let id = BigInt(lo); id <= BigInt(hi); id++) out.push(id.toString());
  }
  return out;
}

async function findByKeys(db: Db, keys: string[]): Promise<Map<string, EnqueuedJob>> {
  const rows = await rowsOf<{ id: string; status: EnqueuedJob['status']; run_at_ms: number; dedupe_key: string }>(
    db,
    sql`SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, dedupe_key
          FROM ${jobs} WHERE dedupe_key = ANY(${sql.param(keys)}::text[])`,
  );
  return new Map(
    rows.map((r) => [
      r.dedupe_key,
      { id: String(r.id), status: r.status, runAt: new Date(Number(r.run_at_ms)), deduplicated: true },
    ]),
  );
}
