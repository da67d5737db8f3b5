// claim: ONE statement selects, locks, marks and returns a batch —
//   UPDATE pgdrain.jobs SET status = 'running', … WHERE id = ANY(ARRAY(SELECT id … ORDER BY priority DESC,
//     run_at, id LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING …
// Kinds listed in pgdrain.paused_kinds are skipped (read once per claim, in the same statement).
// SKIP LOCKED lets any number of workers claim side by side; attempts grow here, at claim time,
// so a job that keeps killing its worker still runs out of attempts. The caller commits before
// running anything.
import { Placeholder, type SQL, and, lte, sql } from 'drizzle-orm';
import { JOB_DEFAULTS, jobs, pausedKinds } from '../db/schema.ts';
import { type Db, fromDriverRow, rowsOf } from './db.ts';

export interface ClaimedJob {
  id: string;
  kind: string;
  payload: unknown;
  /** Attempts including this one. */
  attempts: number;
  maxAttempts: number;
  /** Higher ran first. */
  priority: number;
  /** Its group key, if it was enqueued with one. */
  groupKey: string | null;
  /** The handler's timeout for this job, if its enqueue set one (else the kind's). */
  timeoutMs: number | null;
  runAt: Date;
  /** The lock token this claim wrote into locked_by; complete/fail/release must present it. */
  lockedBy: string;
  visibilitySeconds: number | null;
  createdAt: Date;
}

export interface ClaimOptions {
  batchSize: number;
  /** Written to locked_by. Unique per claim (see the drain), so it fences settlement exactly. */
  lockToken: string;
  /** The lease of jobs without a visibility of their own, written into locked_until with theirs:
   * every reaper applies what the claiming drainer holds. Default 30 s. */
  leaseSeconds?: number;
  /** Claim only these kinds; omit for every kind. */
  kinds?: readonly string[];
  /** Claim only these jobs, if they are ready and nobody holds them (run-now after an enqueue). */
  ids?: readonly string[];
}

export async function claim(db: Db, options: ClaimOptions): Promise<ClaimedJob[]> {
  if (options.batchSize < 1 || options.kinds?.length === 0 || options.ids?.length === 0) return [];
  const rows = await preparedClaim(db, options.kinds !== undefined, options.ids !== undefined).execute({ ...claimValues(options) });
  return claimedJobs(rows, options.lockToken);
}

/** The plan PostgreSQL would use for this claim right now (EXPLAIN, not executed). */
export async function explainClaim(db: Db, options: ClaimOptions): Promise<string> {
  const query = claimStatement(db, options.kinds !== undefined, options.ids !== undefined).toSQL();
  const values: Record<string, unknown> = { ...claimValues(options) };
  const params = query.params.map((p) => (p instanceof Placeholder ? values[p.name] : p));
  const rows = await rowsOf<{ 'QUERY PLAN': string }>(db, sql.join([sql.raw('EXPLAIN '), rawWithParams({ sql: query.sql, params })]));
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}


function rawWithParams(query: { sql: string; params: unknown[] }) {
  // Re-binds the builder's $n placeholders as parameters of the EXPLAIN statement.
  const parts = query.sql.split(/\$(\d+)/);
  const chunks = [sql.raw(parts[0] ?? '')];
  for (let i = 1; i < parts.length; i += 2) {
    chunks.push(sql`${sql.param(query.params[Number(parts[i]) - 1])}`, sql.raw(parts[i + 1] ?? ''));
  }
  return sql.join(chunks);
}

// The claim runs thousands of times a second: it is a named prepared statement per connection
// (parsed and planned once), with the batch size, lock token, kinds and ids as parameters.
const prepared = new WeakMap<Db, Map<string, ReturnType<typeof prepareClaim>>>();
function preparedClaim(db: Db, filtered: boolean, byIds: boolean) {
  let byDb = prepared.get(db);
  if (!byDb) prepared.set(db, (byDb = new Map()));
  const name = `pgdrain_claim${filtered ? '_kinds' : ''}${byIds ? '_ids' : ''}`;
  let statement = byDb.get(name);
  if (!statement) byDb.set(name, (statement = prepareClaim(db, filtered, byIds, name)));
  return statement;
}
const prepareClaim = (db: Db, filtered: boolean, byIds: boolean, name: string) => claimStatement(db, filtered, byIds).prepare(name);

/** A claim's parameters, bound as values (a one-off statement) rather than placeholders (prepared). */
export interface ClaimValues {
  limit: number;
  token: string;
  kinds: readonly string[];
  ids: readonly string[];
  lease: number;
}

export const claimValues = (options: ClaimOptions): ClaimValues => ({
  limit: options.batchSize,
  token: options.lockToken,
  kinds: options.kinds ?? [],
  ids: options.ids ?? [],
  lease: options.leaseSeconds ?? JOB_DEFAULTS.visibilityTimeoutSeconds,
});

/** The claim as a statement: with placeholders to prepare once, or with `values` bound in. */
export function claimStatement(db: Db, filtered: boolean, byIds = false, values?: ClaimValues) {
  const param = (name: keyof ClaimValues, cast: string) =>
    values ? sql`${sql.param(values[name])}::${sql.raw(cast)}` : sql`${sql.placeholder(name)}::${sql.raw(cast)}`;
  // `status = 'pending'` stays a literal: with a parameter there, a generic plan could not prove
  // that the partial index jobs_ready applies and would scan the whole table.
  const ready = db
    .select({ id: jobs.id })
    .from(jobs)
    .where(
      and(
        sql`${jobs.status} = 'pending'`,
        lte(jobs.runAt, sql`now()`),
        filtered ? sql`${jobs.kind} = ANY(${param('kinds', 'text[]')})` : undefined,
        byIds ? sql`${jobs.id} = ANY(${param('ids', 'bigint[]')})` : undefined,
        // Paused kinds: an InitPlan, read once per claim. Wrapped in coalesce (which never changes
        // the result: neither side can be NULL) because the planner estimates a bare
        // `<> ALL(subquery array)` to match almost no row, and then prefers reading and sorting
        // the whole backlog over walking jobs_ready in order: a drain three times slower.
        sql`coalesce(${jobs.kind} <> ALL(ARRAY(SELECT paused.kind FROM ${pausedKinds} AS paused)), true)`,
      ),
    )
    // Exactly the index's order: jobs_ready is (priority DESC NULLS LAST, run_at, id), and a bare
    // DESC means NULLS FIRST, which the planner would meet with a sort of the whole backlog.
    .orderBy(sql`${jobs.priority} DESC NULLS LAST`, jobs.runAt, jobs.id)
    .limit(values ? values.limit : sql.placeholder('limit'))
    .for('update', { skipLocked: true });
  // `id = ANY(ARRAY(subquery))` is `id IN (subquery)` with the subquery pinned as an InitPlan: it
  // runs once and the update then looks its rows up by primary key. With IN, a planner that
  // misjudges the LIMIT (a generic plan, stale statistics) may pick a hash join over the whole table.
  return claimUpdate(db, sql`${jobs.id} = ANY(ARRAY(${ready}))`, param('token', 'text'), param('lease', 'int'));
}

/** The claim's write, whichever rows `which` picks: running under `token`, its lease written, one
 * more attempt; returning what a drainer needs of each job (the same for every kind of claim). */
export function claimUpdate(db: Db, which: SQL, token: SQL, leaseSeconds: SQL) {
  return db
    .update(jobs)
    .set({
      status: sql`'running'`,
      lockedAt: sql`now()`,
      lockedUntil: sql`now() + make_interval(secs => coalesce(${jobs.visibilitySeconds}, ${leaseSeconds}))`,
      lockedBy: token,
      attempts: sql`${jobs.attempts} + 1`,
    })
    .where(which)
    .returning(CLAIMED_COLUMNS);
}

/** What a claim returns of each job, in this order (claim.ts and complete-and-claim.ts alike). */
const CLAIMED_COLUMNS = {
  id: jobs.id,
  kind: jobs.kind,
  payload: jobs.payload,
  attempts: jobs.attempts,
  maxAttempts: jobs.maxAttempts,
  priority: jobs.priority,
  groupKey: jobs.groupKey,
  timeoutMs: jobs.timeoutMs,
  runAt: jobs.runAt,
  lockedBy: jobs.lockedBy,
  visibilitySeconds: jobs.visibilitySeconds,
  createdAt: jobs.createdAt,
};

type ClaimedRow = Omit<ClaimedJob, 'lockedBy'> & { lockedBy: string | null };

/** A claimed row read by raw SQL (column names, driver values) into what the builder returns. */
export const claimedRowFromDriver = (row: Record<string, unknown>): ClaimedRow => fromDriverRow(CLAIMED_COLUMNS, row);

/** Claimed rows as jobs in claim order (RETURNING does not keep the subquery's order), each with
 * the lock token of its claim. */
export function claimedJobs(rows: readonly ClaimedRow[], lockToken: string): ClaimedJob[] {
  return rows
    .map((r) => ({ ...r, id: String(r.id), lockedBy: lockToken }))
    .sort((a, b) => b.priority - a.priority || a.runAt.getTime() - b.runAt.getTime() || compareIds(a.id, b.id));
}

/** Orders bigint ids given as decimal strings without converting them to numbers. */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
