// The state of recurring schedules: one row per schedule name with the last slot enqueued. An
// evaluation locks its schedule's row (FOR UPDATE) in the transaction that enqueues the due slots
// and advances it, so concurrent evaluators — sidecars, Worker invocations — queue behind the lock
// and then find nothing left to enqueue: each slot is enqueued once.
import { sql } from 'drizzle-orm';
import { schedules } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

export interface ScheduleState {
  name: string;
  /** The latest slot handled (enqueued or skipped, or the first evaluation's time). */
  lastSlot: Date | null;
  /** The latest slot a job was enqueued for; null: never. */
  lastEnqueuedSlot: Date | null;
  skipped: number;
}

/** Creates the row if needed, locks it until the caller's transaction ends, and returns it with
 * the database's clock. Call inside a transaction. */
export async function lockScheduleState(tx: Db, name: string): Promise<ScheduleState & { databaseNow: Date }> {
  await tx.execute(sql`INSERT INTO ${schedules} (name) VALUES (${name}) ON CONFLICT (name) DO NOTHING`);
  const [row] = await rowsOf<{ last_slot_ms: number | null; skipped: number; now_ms: number }>(
    tx,
    sql`SELECT (extract(epoch from last_slot) * 1000)::float8 AS last_slot_ms, skipped::float8 AS skipped,
               (extract(epoch from now()) * 1000)::float8 AS now_ms
          FROM ${schedules} WHERE name = ${name} FOR UPDATE`,
  );
  if (!row) throw new Error(`schedule ${name}: its state row vanished while being locked`);
  return {
    name,
    lastSlot: row.last_slot_ms === null ? null : new Date(Number(row.last_slot_ms)),
    lastEnqueuedSlot: null, // not needed by an evaluation
    skipped: Number(row.skipped),
    databaseNow: new Date(Number(row.now_ms)),
  };
}

/** Records the latest slot handled (enqueued or skipped), the latest one enqueued if any, and adds
 * to the skipped count. */
export async function advanceSchedule(
  tx: Db,
  name: string,
  lastSlot: Date,
  skipped: number,
  lastEnqueued: Date | null = null,
): Promise<void> {
  await tx.execute(
    sql`UPDATE ${schedules} SET last_slot = ${lastSlot.toISOString()}::timestamptz,
      skipped = skipped + ${skipped}::bigint,
               last_enqueued_slot = coalesce(${lastEnqueued?.toISOString() ?? null}::timestamptz, last_enqueued_slot),
                 evaluated_at = now()
         WHERE name = ${name}`,
  );
}

export async function listScheduleStates(db: Db): Promise<Map<string, ScheduleState>> {
  const rows = await rowsOf<{
    name: string;
    last_slot_ms: number | null;
    last_enqueued_ms: number | null;
    skipped: number;
  }>(
    db,
    sql`SELECT name, (extract(epoch from last_slot) * 1000)::float8 AS last_slot_ms,
               (extract(epoch from last_enqueued_slot) * 1000)::float8 AS last_enqueued_ms, skipped::float8 AS skipped
          FROM ${schedules}`,
  );
  const date = (ms: number | null) => (ms === null ? null : new Date(Number(ms)));
  return new Map(
    rows.map((r) => [
      r.name,
      {
        name: r.name,
        lastSlot: date(r.last_slot_ms),
        lastEnqueuedSlot: date(r.last_enqueued_ms),
        skipped: Number(r.skipped),
      },
    ]),
  );
}
