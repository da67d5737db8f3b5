// renew: extends the leases (locked_at, locked_until) of the jobs a drainer holds while their
// handlers run, so a short visibility timeout recovers a crashed drainer's jobs quickly without
// reclaiming a slow but live one. One statement for all of a drainer's jobs per tick, never one
// per job, fenced by each claim's lock token: a job that was reaped and claimed by someone else is
// not renewed, and is missing from the answer. The same statement saves what the handlers reported
// with ctx.progress(), and its answer says which jobs someone asked to cancel.
import { sql } from 'drizzle-orm';
import { JOB_DEFAULTS, jobs } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';
import { type HeldJob, fenced, heldRows } from './fence.ts';

export interface HeldLease extends HeldJob {
  /** How long the renewed lease lasts; default the job's visibility_seconds, else 30 s. */
  visibilityTimeoutSeconds?: number | null;
  /** Progress to save (JSON text); unset keeps what is there. */
  progressJson?: string;
}

export interface RenewedLease {
  id: string;
  /** Someone asked to cancel it: its handler should stop. */
  cancelRequested: boolean;
}

/** Renews and returns the leases still held; the caller has lost the others. */
export async function renew(db: Db, held: readonly HeldLease[]): Promise<RenewedLease[]> {
  if (held.length === 0) return [];
  const leases = heldRows(held, {
    lease: { type: 'int', values: held.map((h) => h.visibilityTimeoutSeconds ?? null) },
    progress: { type: 'jsonb', values: held.map((h) => h.progressJson ?? null) },
  });
  const rows = await rowsOf<{ id: string; cancel: boolean }>(
    db,
    sql`UPDATE ${jobs} j SET locked_at = now(),
               locked_until = now() +
                 make_interval(secs => coalesce(h.lease,
                   j.visibility_seconds, ${JOB_DEFAULTS.visibilityTimeoutSeconds})),
               progress = coalesce(h.progress, j.progress)
          FROM ${leases} WHERE ${fenced(held)} RETURNING j.id::text AS id, j.cancel_requested_at IS NOT NULL AS cancel`,
  );
  return rows.map((r) => ({ id: String(r.id), cancelRequested: r.cancel === true }));
}

/** The ids whose lease was extended; the caller has lost the others. */
export async function renewLeases(db: Db, held: readonly HeldLease[]): Promise<string[]> {
  return (await renew(db, held)).map((r) => r.id);
}
