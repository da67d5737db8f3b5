// claim: ONE statement selects, locks, marks and returns a batch. SKIP LOCKED lets any number of
// workers claim side by side; attempts grow here, at claim time, so a job that keeps killing its
// worker still runs out of attempts. The caller commits before running anything.
import { and, eq, inArray, lte, sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

export interface ClaimedJob {
  id: string;
  kind: string;
  payload: unknown;
  /** Attempts including this one. */
  attempts: number;
  maxAttempts: number;
  runAt: Date;
  /** The lock token this claim wrote into locked_by; complete/fail/release must present it. */
  lockedBy: string;
  visibilitySeconds: number | null;
  createdAt: Date;
}

export interface ClaimOptions {
  batchSize: number;
  /** Written to locked_by. Unique per claim (see drain.ts), so it fences settlement exactly. */
  lockToken: string;
  /** Claim only these kinds; omit for every kind. */
  kinds?: readonly string[];
}

export async function claim(db: Db, options: ClaimOptions): Promise<ClaimedJob[]> {
  if (options.batchSize < 1 || options.kinds?.length === 0) return [];
  const rows = await claimStatement(db, options);
  // RETURNING does not keep the subquery's order; restore it so work starts oldest first.
  rows.sort((a, b) => a.runAt.getTime() - b.runAt.getTime() || compareIds(a.id, b.id));
  return rows.map((r) => ({ ...r, id: String(r.id), lockedBy: options.lockToken }));
}

/** The plan PostgreSQL would use for this claim right now (EXPLAIN, not executed). */
export async function explainClaim(db: Db, options: ClaimOptions): Promise<string> {
  const query = claimStatement(db, options).toSQL();
  const rows = await rowsOf<{ 'QUERY PLAN': string }>(db, sql.join([sql.raw('EXPLAIN '), rawWithParams(query)]));
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

function rawWithParams(query: { sql: string; params: unknown[] }) {
  // Re-binds the builder's $n placeholders as parameters of the EXPLAIN statement.
  const parts = query.sql.split(/\$(\d+)/);
  const chunks = [sql.raw(parts[0] ?? '')];
  for (let i = 1; i < parts.length; i += 2) {
    chunks.push(sql`${query.params[Number(parts[i]) - 1]}`, sql.raw(parts[i + 1] ?? ''));
  }
  return sql.join(chunks);
}

function claimStatement(db: Db, { batchSize, lockToken, kinds }: ClaimOptions) {
  const ready = db
    .select({ id: jobs.id })
    .from(jobs)
    .where(
      and(
        eq(jobs.status, 'pending'),
        lte(jobs.runAt, sql`now()`),
        kinds ? inArray(jobs.kind, kinds as string[]) : undefined,
      ),
    )
    .orderBy(jobs.runAt, jobs.id)
    .limit(batchSize)
    .for('update', { skipLocked: true });
  return db
    .update(jobs)
    .set({ status: 'running', lockedAt: sql`now()`, lockedBy: lockToken, attempts: sql`${jobs.attempts} + 1` })
    .where(inArray(jobs.id, ready))
    .returning({
      id: jobs.id,
      kind: jobs.kind,
      payload: jobs.payload,
      attempts: jobs.attempts,
      maxAttempts: jobs.maxAttempts,
      runAt: jobs.runAt,
      lockedBy: jobs.lockedBy,
      visibilitySeconds: jobs.visibilitySeconds,
      createdAt: jobs.createdAt,
    });
}

/** Orders bigint ids given as decimal strings without converting them to numbers. */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
