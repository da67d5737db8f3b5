// enqueue / enqueueMany: an INSERT that joins the caller's transaction, with pg_notify in the
// same statement, so the wake-up is delivered at COMMIT and never for a rollback.
import { sql } from 'drizzle-orm';
import { JOB_DEFAULTS, type JobStatus, PGDRAIN_SCHEMA, jobDependencies, jobs } from '../db/schema.ts';
import { compareIds } from './claim.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from './db.ts';

export interface NewJob {
  kind: string;
  payload: unknown;
  /** When the job becomes claimable; default now. */
  runAt?: Date;
  maxAttempts?: number;
  /** While a job with this key exists, enqueueing the key again returns that job instead. */
  dedupeKey?: string;
  /** With a dedupeKey: 'keep' (default) returns the existing job as it is; 'replace' (debounce)
   * gives a pending job of the same kind this payload and run_at, and when the key's job is
   * running or dead, leaves it be (it gives up the key) and enqueues this one. */
  dedupeMode?: DedupeMode;
  visibilitySeconds?: number;
  /** -1000..1000, higher runs first among ready jobs; default 0. */
  priority?: number;
  /** Jobs of one kind with the same key share the kind's groupConcurrency (1-200 characters). */
  groupKey?: string;
  /** The handler's timeout for this job (100 ms to a day); default the kind's. */
  timeoutMs?: number;
  /** Keep it this long once completed or cancelled (its kind's keepCompletedSeconds). */
  keepSeconds?: number;
  /** Ids of jobs this one waits for: it is claimed once every one of them has completed, and is
   * dead at once if one of them ends dead or cancelled. Every id must exist. */
  after?: readonly string[];
  /** The W3C trace context of the span that enqueued it (`00-<trace>-<span>-<flags>`): the handler's
   * span links to it. Set by enqueue() when a tracer is registered (src/tracing.ts). */
  traceparent?: string;
}

/** `after` named jobs that do not exist (completed jobs are deleted unless their kind keeps them). */
export class UnknownDependencyError extends Error {
  override name = 'UnknownDependencyError';
  readonly ids: readonly string[];
  constructor(ids: readonly string[]) {
    super(`after names jobs that do not exist: ${ids.join(', ')} (completed jobs are deleted unless their kind keeps them: enqueue a job with the jobs it waits for, in one transaction)`);
    this.ids = ids;
  }
}

export type DedupeMode = 'keep' | 'replace';

export interface EnqueuedJob {
  id: string;
  status: JobStatus;
  runAt: Date;
  /** True when the dedupe key matched an existing job and nothing was inserted. */
  deduplicated: boolean;
  /** dedupeMode 'replace': a pending job with the key took this payload and run_at. */
  replaced?: boolean;
}

/** Rows per statement of enqueueMany: large enough to amortise the round trip, small enough to
 * keep each statement's parameters and memory modest. Measured (PostgreSQL 18, 2 cores, 50k jobs
 * in one transaction, four rounds): chunks of 5-10k insert at 145-205k jobs/s, 25k at 135-146k,
 * one 50k statement at 115-119k. */
export const ENQUEUE_CHUNK = 10_000;

const JOBS_ID_SEQUENCE = `${PGDRAIN_SCHEMA}.jobs_id_seq`;

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

/** A job's columns as statement values; what the enqueue leaves unsaid gets the defaults. */
function values(job: NewJob) {
  return {
    kind: job.kind,
    payload: JSON.stringify(job.payload ?? null),
    runAt: job.runAt ? job.runAt.toISOString() : null,
    maxAttempts: job.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    visibility: job.visibilitySeconds ?? null,
    priority: job.priority ?? JOB_DEFAULTS.priority,
    groupKey: job.groupKey ?? null,
    timeoutMs: job.timeoutMs ?? null,
    keepSeconds: job.keepSeconds ?? null,
    traceparent: job.traceparent ?? null,
  };
}

export async function enqueue(db: Db, job: NewJob): Promise<EnqueuedJob> {
  if (job.after !== undefined && job.after.length > 0) return db.transaction((tx) => enqueueWaiting(tx, job, job.after!));
  if (job.dedupeKey === undefined) {
    // The common case, on every request of the API: one prepared INSERT whose RETURNING also
    // sends the notification (for a job that is due now).
    const [row] = await preparedInsert(db).execute(values(job));
    if (!row) throw new Error('enqueue: the INSERT returned no row');
    return { id: String(row.id), status: row.status, runAt: row.runAt, deduplicated: false };
  }
  if (job.dedupeMode === 'replace') return db.transaction((tx) => enqueueReplacing(tx, job, job.dedupeKey!));
  // A concurrent enqueue of the same key can commit between our INSERT's conflict check and our
  // snapshot, leaving neither branch with a row; trying again then finds the committed job.
  for (let attempt = 0; attempt < 5; attempt++) {
    const [row] = await rowsOf<Returned>(
      db,
      sql`WITH ins AS (${insertKeyed(job, job.dedupeKey)})
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

/** INSERT of one job with a dedupe key, nothing when the key is taken; RETURNING what enqueue reports. */
function insertKeyed(job: NewJob, key: string) {
  const v = values(job);
  return sql`INSERT INTO ${jobs} (kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds, priority, group_key, timeout_ms, keep_seconds, traceparent)
             VALUES (${v.kind}, ${v.payload}::jsonb, coalesce(${v.runAt}::timestamptz, now()), ${v.maxAttempts}::int, ${key}::text,
                     ${v.visibility}::int, ${v.priority}::int, ${v.groupKey}::text, ${v.timeoutMs}::int, ${v.keepSeconds}::int, ${v.traceparent}::text)
             ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
             RETURNING id, status, run_at, kind`;
}

/**
 * dedupeMode 'replace' (debounce), statement by statement in one transaction (each sees the
 * last): a pending job of the kind with the key takes the new payload and run_at; else the key's
 * running or dead job gives up the key (it runs on, or stays dead, untouched otherwise) and the job
 * is inserted. A key held by another kind's job is left alone, as 'keep' would. pgdrain.enqueue()
 * in SQL does the same.
 */
async function enqueueReplacing(tx: Db, job: NewJob, key: string): Promise<EnqueuedJob> {
  const v = values(job);
  const notify = sql`CASE WHEN run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END`;
  for (let attempt = 0; attempt < 5; attempt++) {
    const [replaced] = await rowsOf<Returned>(
      tx,
      sql`UPDATE ${jobs} SET payload = ${v.payload}::jsonb, run_at = coalesce(${v.runAt}::timestamptz, now())
           WHERE dedupe_key = ${key}::text AND kind = ${v.kind} AND status = 'pending'
       RETURNING id, status, extract(epoch from run_at) * 1000 AS run_at_ms, false AS inserted, ${notify} AS notified`,
    );
    if (replaced) return { ...toEnqueued(replaced), replaced: true };
    await tx.execute(sql`UPDATE ${jobs} SET dedupe_key = NULL WHERE dedupe_key = ${key}::text AND kind = ${v.kind} AND status IN ('running', 'dead')`);
    const [inserted] = await rowsOf<Returned>(
      tx,
      sql`WITH ins AS (${insertKeyed(job, key)})
          SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted, ${notify} AS notified FROM ins`,
    );
    if (inserted) return toEnqueued(inserted);
    const [holder] = await rowsOf<Returned & { kind: string }>(
      tx,
      sql`SELECT id, status, kind, extract(epoch from run_at) * 1000 AS run_at_ms, false AS inserted FROM ${jobs} WHERE dedupe_key = ${key}::text`,
    );
    if (holder && holder.kind !== v.kind) return toEnqueued(holder);
  }
  throw new Error(`enqueue: could not replace or insert the job with dedupe key ${JSON.stringify(key)}`);
}

const prepared = new WeakMap<Db, ReturnType<typeof prepareInsert>>();
function preparedInsert(db: Db) {
  let statement = prepared.get(db);
  if (!statement) prepared.set(db, (statement = prepareInsert(db)));
  return statement;
}
function prepareInsert(db: Db) {
  return db
    .insert(jobs)
    .values({
      kind: sql`${sql.placeholder('kind')}`,
      payload: sql`${sql.placeholder('payload')}::jsonb`,
      runAt: sql`coalesce(${sql.placeholder('runAt')}::timestamptz, now())`,
      maxAttempts: sql`${sql.placeholder('maxAttempts')}::int`,
      visibilitySeconds: sql`${sql.placeholder('visibility')}::int`,
      priority: sql`${sql.placeholder('priority')}::int`,
      groupKey: sql`${sql.placeholder('groupKey')}::text`,
      timeoutMs: sql`${sql.placeholder('timeoutMs')}::int`,
      keepSeconds: sql`${sql.placeholder('keepSeconds')}::int`,
      traceparent: sql`${sql.placeholder('traceparent')}::text`,
    })
    .returning({
      id: jobs.id,
      status: jobs.status,
      runAt: jobs.runAt,
      notified: sql`CASE WHEN ${jobs.runAt} <= now() THEN pg_notify(${NOTIFY_CHANNEL}, ${jobs.kind}) END`,
    })
    .prepare('pgdrain_enqueue');
}

/**
 * Inserts many jobs with one statement per chunk of ENQUEUE_CHUNK (a jsonb array of payloads
 * expanded on the server, not a loop of INSERTs) and one pg_notify per distinct ready kind; all or
 * nothing (more than one chunk run in one transaction). Returns the jobs in input order; an input
 * whose dedupe key matched an existing job (or an earlier input) returns that job. Jobs that ask
 * to replace a keyed job (dedupeMode 'replace') go one by one after the others, in input order.
 */
export async function enqueueMany(db: Db, input: readonly NewJob[]): Promise<EnqueuedJob[]> {
  if (input.some(oneByOne)) return db.transaction((tx) => enqueueManyOneByOne(tx, input));
  if (input.length <= ENQUEUE_CHUNK) return chunkStatement(input).run(db);
  return db.transaction(async (tx) => {
    // The next chunk's statement is built while the one before it is on its way.
    const out: EnqueuedJob[] = [];
    let inFlight: Promise<EnqueuedJob[]> | undefined;
    for (let start = 0; start < input.length; start += ENQUEUE_CHUNK) {
      const statement = chunkStatement(input.slice(start, start + ENQUEUE_CHUNK));
      if (inFlight) out.push(...(await inFlight));
      inFlight = statement.run(tx);
      // Awaited above or below; a failure while building the next chunk must not leave it unhandled.
      inFlight.catch(() => {});
    }
    out.push(...(await inFlight!));
    return out;
  });
}

/** Jobs that replace a keyed one or wait for others go one by one (after the others, in input order). */
const oneByOne = (j: NewJob) => (j.dedupeKey !== undefined && j.dedupeMode === 'replace') || (j.after !== undefined && j.after.length > 0);

async function enqueueManyOneByOne(tx: Db, input: readonly NewJob[]): Promise<EnqueuedJob[]> {
  const bulk = await enqueueMany(tx, input.filter((j) => !oneByOne(j)));
  const out: EnqueuedJob[] = [];
  let next = 0;
  for (const job of input) out.push(oneByOne(job) ? await enqueue(tx, job) : bulk[next++]!);
  return out;
}

/**
 * A job that waits for others (`after`), in one transaction: the jobs it waits for are marked as
 * having dependents — which locks them, so none can complete before this job is committed and
 * counted —, then it is inserted `waiting` with the count of those not completed yet (`dead` at
 * once if one of them ended dead or cancelled), with a dependency row per id. pgdrain.enqueue()
 * in SQL does the same.
 */
async function enqueueWaiting(tx: Db, job: NewJob, after: readonly string[]): Promise<EnqueuedJob> {
  const ids = [...new Set(after)];
  const parents = await rowsOf<{ id: string; status: JobStatus }>(
    tx,
    // Locked in id order, so that two enqueues waiting for the same jobs cannot deadlock.
    sql`WITH parents AS MATERIALIZED (SELECT id FROM ${jobs} WHERE id = ANY(${sql.param(ids)}::bigint[]) ORDER BY id FOR UPDATE)
        UPDATE ${jobs} j SET has_dependents = true FROM parents p WHERE j.id = p.id RETURNING j.id::text AS id, j.status`,
  );
  const missing = ids.filter((id) => !parents.some((p) => p.id === id));
  if (missing.length > 0) throw new UnknownDependencyError(missing);
  const ended = parents.filter((p) => p.status === 'dead' || p.status === 'cancelled').sort((a, b) => compareIds(a.id, b.id))[0];
  const unfinished = parents.filter((p) => p.status !== 'completed').length;
  const v = values(job);
  const [row] = await rowsOf<Returned>(
    tx,
    sql`WITH ins AS (
          INSERT INTO ${jobs} (kind, payload, run_at, max_attempts, visibility_seconds, priority, group_key, timeout_ms, keep_seconds, traceparent, status, waiting_for, last_error, finished_at)
          VALUES (${v.kind}, ${v.payload}::jsonb, coalesce(${v.runAt}::timestamptz, now()), ${v.maxAttempts}::int, ${v.visibility}::int, ${v.priority}::int,
                  ${v.groupKey}::text, ${v.timeoutMs}::int, ${v.keepSeconds}::int, ${v.traceparent}::text,
                  ${ended ? 'dead' : unfinished > 0 ? 'waiting' : 'pending'}, ${ended || unfinished === 0 ? null : unfinished}::int,
                  ${ended ? `job ${ended.id} it waits for ended ${ended.status}` : null}::text, ${ended ? sql`now()` : sql`NULL`})
          RETURNING id, status, run_at, kind),
        deps AS (INSERT INTO ${jobDependencies} (depends_on, job_id) SELECT unnest(${sql.param(ids)}::bigint[]), id FROM ins)
        SELECT id, status, extract(epoch from run_at) * 1000 AS run_at_ms, true AS inserted,
               CASE WHEN status = 'pending' AND run_at <= now() THEN pg_notify(${NOTIFY_CHANNEL}, kind) END AS notified
          FROM ins`,
  );
  if (!row) throw new Error('enqueue: the INSERT returned no row');
  return toEnqueued(row);
}

/** One chunk's INSERT, built; run() sends it and reads the jobs back in input order. */
function chunkStatement(chunk: readonly NewJob[]): { run(db: Db): Promise<EnqueuedJob[]> } {
  const first = chunk[0];
  if (!first) return { run: async () => [] };
  // One jsonb array for the payloads (a single parse on the server, a single JSON.stringify here);
  // the other columns travel as arrays only when some job sets them, else as constants.
  const payloads = JSON.stringify(chunk.map((j) => j.payload ?? null));
  const { present, oneKind, readyKinds } = survey(chunk);
  const has = (field: Optional) => present.has(field);
  const column = (values: unknown[], type: string) => sql`(${sql.param(values)}::${sql.raw(type)}[])[ord]`;
  const kind = oneKind ? sql`${first.kind}::text` : column(chunk.map((j) => j.kind), 'text');
  const runAt = has('runAt') ? sql`coalesce(${column(chunk.map((j) => j.runAt?.toISOString() ?? null), 'timestamptz')}, now())` : sql`now()`;
  const maxAttempts = has('maxAttempts') ? column(chunk.map((j) => j.maxAttempts ?? JOB_DEFAULTS.maxAttempts), 'int') : sql.raw(String(JOB_DEFAULTS.maxAttempts));
  // ON CONFLICT makes every row a speculative insertion: only pay for it when a job has a key.
  const keyed = has('dedupeKey');
  const key = keyed ? column(chunk.map((j) => j.dedupeKey ?? null), 'text') : sql`NULL::text`;
  const visibility = has('visibilitySeconds') ? column(chunk.map((j) => j.visibilitySeconds ?? null), 'int') : sql`NULL::int`;
  const priority = has('priority') ? column(chunk.map((j) => j.priority ?? JOB_DEFAULTS.priority), 'int') : sql.raw(String(JOB_DEFAULTS.priority));
  const groupKey = has('groupKey') ? column(chunk.map((j) => j.groupKey ?? null), 'text') : sql`NULL::text`;
  const timeoutMs = has('timeoutMs') ? column(chunk.map((j) => j.timeoutMs ?? null), 'int') : sql`NULL::int`;
  const keepSeconds = has('keepSeconds') ? column(chunk.map((j) => j.keepSeconds ?? null), 'int') : sql`NULL::int`;
  const traceparent = has('traceparent') ? column(chunk.map((j) => j.traceparent ?? null), 'text') : sql`NULL::text`;

  // ids come from nextval in input order (the ORDER BY runs below the projection), so the inserted
  // ids in ascending order are the inserted inputs in order. They usually form one contiguous
  // range; only when a concurrent enqueue interleaved does the full list travel back.
  const statement = sql`WITH input AS (
          SELECT value AS payload, ordinality AS ord FROM jsonb_array_elements(${payloads}::jsonb) WITH ORDINALITY),
        ins AS (
          INSERT INTO ${jobs} (id, kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds, priority, group_key, timeout_ms, keep_seconds, traceparent)
          SELECT nextval(${JOBS_ID_SEQUENCE}::regclass), ${kind}, payload, ${runAt}, ${maxAttempts}, ${key}, ${visibility}, ${priority}, ${groupKey},
                 ${timeoutMs}, ${keepSeconds}, ${traceparent}
            FROM input ORDER BY ord
          ${keyed ? sql`ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING` : sql``}
          RETURNING id, dedupe_key),
        range AS (SELECT min(id) AS lo, max(id) AS hi, count(*)::int AS n FROM ins)
        SELECT lo::text, hi::text, n,
               CASE WHEN hi - lo + 1 <> n THEN (SELECT array_agg(id ORDER BY id) FROM ins) END AS ids,
               ${keyed ? sql`(SELECT array_agg(id ORDER BY id) FROM ins WHERE dedupe_key IS NOT NULL)` : sql`NULL::bigint[]`} AS keyed_ids,
               ${keyed ? sql`(SELECT array_agg(dedupe_key ORDER BY id) FROM ins WHERE dedupe_key IS NOT NULL)` : sql`NULL::text[]`} AS keys,
               (extract(epoch from now()) * 1000)::float8 AS now_ms,
               (SELECT count(pg_notify(${NOTIFY_CHANNEL}, k)) FROM unnest(${sql.param(readyKinds)}::text[]) AS k) AS notified
          FROM range`;
  return {
    async run(db) {
      const [row] = await rowsOf<{ lo: string | null; hi: string | null; n: number; ids: string[] | null; keyed_ids: string[] | null; keys: string[] | null; now_ms: number }>(
        db,
        statement,
      );
      const ids = row?.ids?.map(String) ?? idRange(row?.lo ?? null, row?.hi ?? null);
      const statementNow = new Date(Number(row?.now_ms ?? Date.now()));
      if (!keyed) {
        // Every input was inserted, in order: the common case pays for nothing else.
        if (ids.length !== chunk.length) throw new Error('enqueueMany: fewer rows came back than were inserted');
        return chunk.map((job, i) => ({ id: ids[i]!, status: 'pending', runAt: job.runAt ?? statementNow, deduplicated: false }));
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
  keyedIds.forEach((id, i) => keyOf.set(String(id), String(keys[i])));
  const inserted = (job: NewJob, id: string): EnqueuedJob => ({ id, status: 'pending', runAt: job.runAt ?? statementNow, deduplicated: false });
  const byKey = new Map<string, string>();
  const plainIds: string[] = [];
  for (const id of ids) {
    const k = keyOf.get(id);
    if (k === undefined) plainIds.push(id);
    else byKey.set(k, id);
  }
  const missingKeys = [...new Set(chunk.map((j) => j.dedupeKey).filter((k): k is string => k !== undefined && !byKey.has(k)))];
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

type Optional = 'runAt' | 'maxAttempts' | 'dedupeKey' | 'visibilitySeconds' | 'priority' | 'groupKey' | 'timeoutMs' | 'keepSeconds' | 'traceparent';
const OPTIONAL: readonly Optional[] = ['runAt', 'maxAttempts', 'dedupeKey', 'visibilitySeconds', 'priority', 'groupKey', 'timeoutMs', 'keepSeconds', 'traceparent'];

/** One pass over a chunk: which optional columns some job sets (the others travel as constants),
 * whether it is all one kind, and the kinds with a job ready now (only those are announced;
 * delayed jobs are found by the poll when due). */
function survey(chunk: readonly NewJob[]) {
  const present = new Set<Optional>();
  const readyKinds = new Set<string>();
  const nowMs = Date.now();
  const kind = chunk[0]?.kind;
  let oneKind = true;
  for (const job of chunk) {
    if (job.kind !== kind) oneKind = false;
    if (present.size < OPTIONAL.length) for (const field of OPTIONAL) if (job[field] !== undefined) present.add(field);
    if (!job.runAt || job.runAt.getTime() <= nowMs) readyKinds.add(job.kind);
  }
  return { present, oneKind, readyKinds: [...readyKinds] };
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
    rows.map((r) => [r.dedupe_key, { id: String(r.id), status: r.status, runAt: new Date(Number(r.run_at_ms)), deduplicated: true }]),
  );
}
