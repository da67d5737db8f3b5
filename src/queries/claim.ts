// claim: ONE statement selects, locks, marks and returns a batch — SELECT * FROM pgdrain.claim(n, kinds,
// token, lease), which is
//   UPDATE pgdrain.jobs SET status = 'running', … WHERE id = ANY(ARRAY(SELECT id … ORDER BY priority DESC,
//     run_at, id LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING …
// (before PostgreSQL 17, ctid in place of id) under planner settings that leave it one plan, the
// walk of jobs_ready. The settings are the function's own (SET clauses): they reach no other
// statement, and with plan_cache_mode = force_generic_plan among them the statement is planned once
// per session, not at every claim. Why each: src/sql/functions/claim.sql (and claim_ids.sql, run-now).
// Kinds listed in pgdrain.paused_kinds are skipped (read once per claim, in the same statement).
// SKIP LOCKED lets any number of workers claim side by side; attempts grow here, at claim time,
// so a job that keeps killing its worker still runs out of attempts. The caller commits before
// running anything.
import { type SQL, sql } from 'drizzle-orm';
import { JOB_DEFAULTS, PGDRAIN_SCHEMA, jobs } from '../db/schema.ts';
import { type Db, rowsOf, sqlLiteral } from './db.ts';
import { nextDueSql } from './next-due.ts';

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
  /** Its own visibility timeout (its kind's), if it has one; else the drainer's applies. */
  visibilityTimeoutSeconds: number | null;
  /** The W3C trace context of its enqueue, if one was traced. */
  traceparent: string | null;
  createdAt: Date;
  /** A workflow run's version, when it is not the first (defineWorkflow `version`); else null. */
  version: number | null;
}

export interface ClaimOptions {
  batchSize: number;
  /** Written to locked_by. Unique per claim (see the drain), so it fences settlement exactly. */
  lockToken: string;
  /** The lease of jobs without a visibility of their own, written into locked_until with theirs:
   * every reaper applies what the claiming drainer holds. Default 30 s. */
  visibilityTimeoutSeconds?: number;
  /** Claim only these kinds (a workflow run's version after the first as `kind@version`: only
   * drainers that have it claim it; jobClaimNames() builds the list); omit for every kind without a
   * version. */
  kinds?: readonly string[];
  /** Claim only these jobs, if they are ready and nobody holds them (run-now after an enqueue). */
  ids?: readonly string[];
  /** Also say, when the claim comes back short, when the next pending job is due (next-due.ts),
   * among these kinds (unset: every kind): claimReportingNextDue(), completeAndClaim(). */
  nextDue?: { kinds?: readonly string[] };
}

/** A claim, and when the claim came back short, when the next job is due (null: none is). */
export interface ClaimedBatch {
  jobs: ClaimedJob[];
  nextDueAt: Date | null;
}

/** claim(), with the next due time in the same statement when it came back short (next-due.ts). */
export async function claimReportingNextDue(db: Db, options: ClaimOptions): Promise<ClaimedBatch> {
  if (options.batchSize < 1 || options.kinds?.length === 0 || options.ids?.length === 0)
    return { jobs: [], nextDueAt: null };
  // One row: the claimed jobs as one json value (CLAIMED_AS_JSON: this claim is the Worker's).
  const [row] = await rowsOf<{ pgdrain_claimed: unknown; pgdrain_next_due: Date | string | null }>(
    db,
    sql`WITH claimed AS
      (${claimStatement(claimValues(options), options.kinds !== undefined, options.ids !== undefined)})
        SELECT ${CLAIMED_AS_JSON} AS pgdrain_claimed, ${nextDueWhenShort(options)} AS pgdrain_next_due`,
  );
  return {
    jobs: claimedJobsFromJson(row?.pgdrain_claimed, options.lockToken),
    nextDueAt: toDate(row?.pgdrain_next_due),
  };
}

/** Beside a claim's result (a CTE `claimed`): when the next job is due, if the claim came back
 * short; evaluated only then. */
export function nextDueWhenShort(options: ClaimOptions): SQL {
  return sql`CASE WHEN (SELECT count(*) FROM claimed) < ${options.batchSize}::int
    THEN ${nextDueSql(options.nextDue?.kinds)} END`;
}

export const toDate = (value: Date | string | null | undefined): Date | null =>
  value == null ? null : value instanceof Date ? value : new Date(value);

export async function claim(db: Db, options: ClaimOptions): Promise<ClaimedJob[]> {
  if (options.batchSize < 1 || options.kinds?.length === 0 || options.ids?.length === 0) return [];
  const rows = await rowsOf<Record<string, unknown>>(
    db,
    claimStatement(claimValues(options), options.kinds !== undefined, options.ids !== undefined),
  );
  return claimedJobsFromDriver(rows, options.lockToken);
}

/**
 * The plan PostgreSQL uses for the claim's statement right now (EXPLAIN, not executed): the body
 * of pgdrain.claim() as the catalog holds it, under the function's own settings, with the options
 * bound to its arguments. `generic`: the plan a cached, parameter-blind plan would be (a prepared
 * statement under plan_cache_mode = force_generic_plan, which every supported version has).
 */
export async function explainClaim(db: Db, options: ClaimOptions, { generic = false } = {}): Promise<string> {
  return db.transaction(async (tx) => {
    const [fn] = await rowsOf<{ body: string; config: string[] | null; args: string[] }>(
      tx,
      sql`SELECT prosrc AS body, proconfig AS config, proargnames AS args FROM pg_proc
        WHERE oid = ${CLAIM_FUNCTION}::regprocedure`,
    );
    if (!fn) throw new Error(`${CLAIM_FUNCTION} is missing: run the migrations`);
    for (const setting of fn.config ?? []) {
      const [name, value] = setting.split(/=(.*)/s) as [string, string];
      await tx.execute(sql`SELECT set_config(${name}, ${value}, true)`);
    }
    // The statement the function runs on this server (PL/pgSQL: `RETURN QUERY <statement>;`, the
    // first for PostgreSQL 17 and later, the second before), its input arguments (how_many,
    // only_kinds, token, lease_seconds; the output columns follow) as $1..$4.
    const types = ['int', 'text[]', 'text', 'int'];
    const statements = [...fn.body.matchAll(/RETURN QUERY([\s\S]*?);/gi)].map((m) => m[1]!);
    const [server] = await rowsOf<{ version: number }>(
      tx,
      sql`SELECT current_setting('server_version_num')::int AS version`,
    );
    let body = (server!.version >= 170000 ? statements[0] : statements.at(-1)) ?? fn.body;
    fn.args.slice(0, types.length).forEach((name, i) => {
      body = body.replace(new RegExp(`\\b(?:claim\\.)?${name}\\b`, 'g'), `$${i + 1}::${types[i]}`);
    });
    const v = claimValues(options);
    const params = [v.limit, options.kinds ?? null, v.token, v.lease];
    let rows: { 'QUERY PLAN': string }[];
    if (generic) {
      await tx.execute(sql`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`);
      await tx.execute(sql.raw(`PREPARE pgdrain_explain_claim(${types.join(', ')}) AS ${body}`));
      // EXPLAIN EXECUTE takes no bind parameters: the values go in as literals.
      rows = await rowsOf(
        tx,
        sql.raw(
          `EXPLAIN EXECUTE pgdrain_explain_claim(${params.map((p, i) => `${sqlLiteral(p)}::${types[i]}`).join(', ')})`,
        ),
      );
      await tx.execute(sql`DEALLOCATE pgdrain_explain_claim`);
    } else {
      rows = await rowsOf(tx, sql.join([sql.raw('EXPLAIN '), bindPositional(body, params)]));
    }
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  });
}

const CLAIM_FUNCTION = `${PGDRAIN_SCHEMA}.claim(integer,text[],text,integer)`;

/** `text` whose $1, $2, … are bound to `params`. */
function bindPositional(text: string, params: readonly unknown[]) {
  const parts = text.split(/\$(\d+)/);
  const chunks = [sql.raw(parts[0] ?? '')];
  for (let i = 1; i < parts.length; i += 2)
    chunks.push(sql`${sql.param(params[Number(parts[i]) - 1])}`, sql.raw(parts[i + 1] ?? ''));
  return sql.join(chunks);
}

/** A claim's parameters. */
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
  lease: options.visibilityTimeoutSeconds ?? JOB_DEFAULTS.visibilityTimeoutSeconds,
});

/** The claim as a statement, its values bound (a claim of given ids through pgdrain.claim_ids). */
export function claimStatement(values: ClaimValues, filtered: boolean, byIds = false): SQL {
  const kinds = filtered ? sql`${sql.param(values.kinds)}::text[]` : sql`NULL::text[]`;
  const rest = sql`${sql.param(values.limit)}::int, ${kinds}, ${sql.param(values.token)}::text,
    ${sql.param(values.lease)}::int`;
  const schema = sql.raw(PGDRAIN_SCHEMA);
  return byIds
    ? sql`SELECT ${CLAIMED_OUTPUT} FROM ${schema}.claim_ids(${sql.param(values.ids)}::bigint[], ${rest})`
    : sql`SELECT ${CLAIMED_OUTPUT} FROM ${schema}.claim(${rest})`;
}

/** The claim's write, whichever rows `which` picks: running under `token`, its lease written, one
 * more attempt; returning what a drainer needs of each job (the same for every kind of claim). */
export function claimUpdate(db: Db, which: SQL, token: SQL, visibilityTimeoutSeconds: SQL) {
  return db
    .update(jobs)
    .set({
      status: sql`'running'`,
      lockedAt: sql`now()`,
      lockedUntil: sql`now() + make_interval(secs => coalesce(${jobs.visibilitySeconds}, ${visibilityTimeoutSeconds}))`,
      lockedBy: token,
      attempts: sql`${jobs.attempts} + 1`,
    })
    .where(which)
    .returning(CLAIMED_COLUMNS);
}

/** What a claim returns of each job, in this order (claim.ts and complete-and-claim.ts alike). Not
 * locked_by: the claim wrote the token its drainer gave it, and every field a row carries is decoded
 * by the driver (in workerd, by a Buffer written in JavaScript): the token was the row's longest. */
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
  visibilitySeconds: jobs.visibilitySeconds,
  traceparent: jobs.traceparent,
  createdAt: jobs.createdAt,
  version: jobs.version,
};

/** pgdrain.claim()'s and pgdrain.claim_ids()'s output columns that a drainer reads (CLAIMED_COLUMNS). */
const CLAIMED_OUTPUT = sql.raw(
  Object.values(CLAIMED_COLUMNS)
    .map((c) => c.name)
    .join(', '),
);

/**
 * A claim's rows (column names, driver values) as jobs in claim order (RETURNING does not keep the
 * subquery's order), each with the lock token of its claim; rows without an id (the one row of
 * NULLs a statement returns when it claimed nothing) are skipped. Built field by field, each
 * column's conversion written out, with no intermediate row: this runs for every job a drain claims
 * (drizzle's column mapping, a method call per column, was a twentieth of workerd's time). The
 * drivers parse jsonb and int4 themselves; timestamps come as text through Drizzle's sessions and
 * as Dates on a bare connection (claim-limited.ts), so both are read.
 */
export function claimedJobsFromDriver(rows: readonly Record<string, unknown>[], lockToken: string): ClaimedJob[] {
  const out: ClaimedJob[] = [];
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    if (r.id === null || r.id === undefined) continue;
    out.push({
      id: String(r.id),
      kind: r.kind as string,
      payload: r.payload,
      attempts: r.attempts as number,
      maxAttempts: r.max_attempts as number,
      priority: r.priority as number,
      groupKey: (r.group_key as string | null | undefined) ?? null,
      timeoutMs: (r.timeout_ms as number | null | undefined) ?? null,
      runAt: asDate(r.run_at),
      lockedBy: lockToken,
      visibilityTimeoutSeconds: (r.visibility_seconds as number | null | undefined) ?? null,
      traceparent: (r.traceparent as string | null | undefined) ?? null,
      createdAt: asDate(r.created_at),
      version: (r.version as number | null | undefined) ?? null,
    });
  }
  return inClaimOrder(out);
}

/**
 * Far from the database (the Worker's claims: claimReportingNextDue(), completeAndClaim()), the
 * claimed rows of a CTE `claimed` as ONE json value: an array per job, its fields in
 * CLAIMED_COLUMNS' order, the id as text (a bigint in JSON is a number). A row per job has every
 * field decoded one by one by the driver, in workerd by a Buffer written in JavaScript (a third of
 * the Worker's time per job, measured); one field is decoded once and read by the runtime's own
 * JSON.parse. Next to the database the rows stay rows: building the JSON is PostgreSQL's CPU,
 * which is what a sidecar's drain waits on.
 */
export const CLAIMED_AS_JSON: SQL = sql.raw(
  `(SELECT json_agg(json_build_array(${Object.values(CLAIMED_COLUMNS)
    .map((c) => (c.name === 'id' ? 'id::text' : c.name))
    .join(', ')})) FROM claimed)`,
);

/** CLAIMED_AS_JSON's value (parsed by the driver, or its text) as jobs in claim order, each with
 * the lock token of its claim. */
export function claimedJobsFromJson(value: unknown, lockToken: string): ClaimedJob[] {
  if (value === null || value === undefined) return [];
  const rows = (typeof value === 'string' ? JSON.parse(value) : value) as unknown[][];
  const out: ClaimedJob[] = new Array(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    out[i] = {
      id: r[0] as string,
      kind: r[1] as string,
      payload: r[2],
      attempts: r[3] as number,
      maxAttempts: r[4] as number,
      priority: r[5] as number,
      groupKey: r[6] as string | null,
      timeoutMs: r[7] as number | null,
      runAt: new Date(r[8] as string),
      lockedBy: lockToken,
      visibilityTimeoutSeconds: r[9] as number | null,
      traceparent: r[10] as string | null,
      createdAt: new Date(r[11] as string),
      version: (r[12] as number | null | undefined) ?? null,
    };
  }
  return inClaimOrder(out);
}

/** Usually in order already (one priority, ids ascending with run_at): one pass says so. */
function inClaimOrder(jobs: ClaimedJob[]): ClaimedJob[] {
  for (let i = 1; i < jobs.length; i++) if (claimOrder(jobs[i - 1]!, jobs[i]!) > 0) return jobs.sort(claimOrder);
  return jobs;
}

const asDate = (value: unknown): Date => (value instanceof Date ? value : new Date(value as string));

/** The claim's order: priority first, then run_at, then id. */
const claimOrder = (a: ClaimedJob, b: ClaimedJob): number =>
  b.priority - a.priority || a.runAt.getTime() - b.runAt.getTime() || compareIds(a.id, b.id);

/** Orders bigint ids given as decimal strings without converting them to numbers. */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
