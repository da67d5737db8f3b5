// enqueue / enqueueMany: an INSERT that joins the caller's transaction, with pg_notify in the
// same statement, so the wake-up is delivered at COMMIT and never for a rollback.
import { sql } from 'drizzle-orm';
import { type Db, NOTIFY_CHANNEL, rowsOf } from './db.ts';

export interface NewJob {
  kind: string;
  payload: unknown;
  /** When the job becomes claimable; default now. */
  runAt?: Date;
  maxAttempts?: number;
  /** While a job with this key exists, enqueueing the key again returns that job instead. */
  dedupeKey?: string;
  visibilitySeconds?: number;
}

export interface EnqueuedJob {
  id: string;
  status: 'pending' | 'running' | 'dead';
  runAt: Date;
  /** True when the dedupe key matched an existing job and nothing was inserted. */
  deduplicated: boolean;
}

/** Rows per statement of enqueueMany: large enough to amortise the round trip, small enough to
 * keep each statement's parameters and memory modest. */
export const ENQUEUE_CHUNK = 10_000;

interface Returned {
  id: string;
  status: EnqueuedJob['status'];
  run_at_ms: number;
  inserted: boolean;
}

const toEnqueued = (r: Returned): EnqueuedJob => ({
  id: String(r.id),
  status: r.status,
  runAt: new Date(Number(r.run_at_ms)),
  deduplicated: !r.inserted,
});

export async function enqueue(db: Db, job: NewJob): Promise<EnqueuedJob> {
  const payload = JSON.stringify(job.payload ?? null);
  const runAt = job.runAt ? job.runAt.toISOString() : null;
  const key = job.dedupeKey ?? null;
  // A concurrent enqueue of the same key can commit between our INSERT's conflict check and our
  // snapshot, leaving neither branch with a row; trying again then finds the committed job.
  for (let attempt = 0; attempt < 5; attempt++) {
    const rows = await rowsOf<Returned>(
      db,
      sql`WITH ins AS (
            INSERT INTO jobs (kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds)
            VALUES (${job.kind}, ${payload}::jsonb, coalesce(${runAt}::timestamptz, now()),
                    coalesce(${job.maxAttempts ?? null}::int, 3), ${key}::text, ${job.visibilitySeconds ?? null}::int)
            ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
            RETURNING id, status, run_at, kind)
          SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted,
                 CASE WHEN run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END AS notified
            FROM ins
          UNION ALL
          SELECT id, status, extract(epoch from run_at) * 1000, false, NULL
            FROM jobs
           WHERE ${key}::text IS NOT NULL AND dedupe_key = ${key}::text AND NOT EXISTS (SELECT 1 FROM ins)`,
    );
    if (rows[0]) return toEnqueued(rows[0]);
    if (key === null) throw new Error('enqueue: the INSERT returned no row');
  }
  throw new Error(`enqueue: could not insert or find the job with dedupe key ${JSON.stringify(key)}`);
}

/**
 * Inserts many jobs with one statement per chunk of ENQUEUE_CHUNK (unnest of arrays, not a loop of
 * INSERTs) and one pg_notify per distinct ready kind. Returns the jobs in input order; an input
 * whose dedupe key matched an existing job (or an earlier input) returns that job.
 */
export async function enqueueMany(db: Db, input: readonly NewJob[]): Promise<EnqueuedJob[]> {
  const out: EnqueuedJob[] = [];
  for (let start = 0; start < input.length; start += ENQUEUE_CHUNK) {
    out.push(...(await enqueueChunk(db, input.slice(start, start + ENQUEUE_CHUNK))));
  }
  return out;
}

async function enqueueChunk(db: Db, chunk: readonly NewJob[]): Promise<EnqueuedJob[]> {
  if (chunk.length === 0) return [];
  const kinds: string[] = [];
  const payloads: string[] = [];
  const runAts: (string | null)[] = [];
  const maxAttempts: (number | null)[] = [];
  const keys: (string | null)[] = [];
  const visibility: (number | null)[] = [];
  for (const job of chunk) {
    kinds.push(job.kind);
    payloads.push(JSON.stringify(job.payload ?? null));
    runAts.push(job.runAt ? job.runAt.toISOString() : null);
    maxAttempts.push(job.maxAttempts ?? null);
    keys.push(job.dedupeKey ?? null);
    visibility.push(job.visibilitySeconds ?? null);
  }
  // ids come from nextval in input order (the ORDER BY runs below the projection), so the
  // returned rows sort back into input order; `ord` travels in no column, hence this detour.
  const rows = await rowsOf<{ id: string; run_at_ms: number; dedupe_key: string | null; notified: number }>(
    db,
    sql`WITH input AS (
          SELECT * FROM unnest(${sql.param(kinds)}::text[], ${sql.param(payloads)}::text[],
                               ${sql.param(runAts)}::timestamptz[], ${sql.param(maxAttempts)}::int[],
                               ${sql.param(keys)}::text[], ${sql.param(visibility)}::int[])
                   WITH ORDINALITY AS t(kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds, ord)),
        ins AS (
          INSERT INTO jobs (id, kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds)
          SELECT nextval(pg_get_serial_sequence('jobs', 'id')), kind, payload::jsonb, coalesce(run_at, now()),
                 coalesce(max_attempts, 3), dedupe_key, visibility_seconds
            FROM (SELECT * FROM input ORDER BY ord) o
          ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
          RETURNING id, kind, run_at, dedupe_key)
        SELECT id, extract(epoch from run_at) * 1000 AS run_at_ms, dedupe_key,
               (SELECT count(pg_notify(${NOTIFY_CHANNEL}, k))
                  FROM (SELECT DISTINCT kind AS k FROM ins WHERE run_at <= now()) ready)::int AS notified
          FROM ins ORDER BY id`,
  );
  const byKey = new Map<string, EnqueuedJob>();
  const plain: EnqueuedJob[] = [];
  for (const r of rows) {
    const job: EnqueuedJob = { id: String(r.id), status: 'pending', runAt: new Date(Number(r.run_at_ms)), deduplicated: false };
    if (r.dedupe_key === null) plain.push(job);
    else byKey.set(r.dedupe_key, job);
  }
  const missingKeys = [...new Set(keys.filter((k): k is string => k !== null && !byKey.has(k)))];
  const existing = missingKeys.length === 0 ? new Map<string, EnqueuedJob>() : await findByKeys(db, missingKeys);
  const seen = new Set<string>();
  let next = 0;
  return chunk.map((job) => {
    const key = job.dedupeKey;
    if (key === undefined) {
      const inserted = plain[next++];
      if (!inserted) throw new Error('enqueueMany: fewer rows came back than were inserted');
      return inserted;
    }
    const inserted = byKey.get(key);
    if (inserted && !seen.has(key)) {
      seen.add(key);
      return inserted;
    }
    const found = inserted ?? existing.get(key);
    if (!found) throw new Error(`enqueueMany: the job with dedupe key ${JSON.stringify(key)} vanished while enqueueing`);
    return { ...found, deduplicated: true };
  });
}

async function findByKeys(db: Db, keys: string[]): Promise<Map<string, EnqueuedJob>> {
  const rows = await rowsOf<{ id: string; status: EnqueuedJob['status']; run_at_ms: number; dedupe_key: string }>(
    db,
    sql`SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, dedupe_key
          FROM jobs WHERE dedupe_key = ANY(${sql.param(keys)}::text[])`,
  );
  return new Map(
    rows.map((r) => [r.dedupe_key, { id: String(r.id), status: r.status, runAt: new Date(Number(r.run_at_ms)), deduplicated: true }]),
  );
}
