// subscriptions: kinds that subscribe to events (defineJob / defineWorkflow `on`, src/db/schema.ts),
// written when a drainer starts with its kinds, read by pgdrain.send_event()'s fan-out (drizzle/
// 0018_subscriptions.sql); the event that started a job, for its handler's ctx.event().
import { sql } from 'drizzle-orm';
import { deadLetterRoutes, jobs, subscriptions } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

/** A kind's subscription to an event, with the options its jobs are enqueued with. */
export interface Subscription {
  event: string;
  kind: string;
  maxAttempts: number;
  priority: number;
  keepSeconds: number | null;
  visibilitySeconds: number | null;
}

export interface SubscriptionRow extends Subscription {
  subscribedAt: Date;
}

/** Writes (or refreshes the options of) these subscriptions, in one statement. */
export async function writeSubscriptions(db: Db, rows: readonly Subscription[]): Promise<void> {
  if (rows.length === 0) return;
  await db
    .insert(subscriptions)
    .values(rows.map((r) => ({ ...r })))
    .onConflictDoUpdate({
      target: [subscriptions.event, subscriptions.kind],
      set: {
        maxAttempts: sql`excluded.max_attempts`,
        priority: sql`excluded.priority`,
        keepSeconds: sql`excluded.keep_seconds`,
        visibilitySeconds: sql`excluded.visibility_seconds`,
      },
    });
}

/** A kind's dead-letter kind, with the options its dead-letter jobs get. */
export interface DeadLetterRoute {
  kind: string;
  deadLetter: string;
  maxAttempts: number;
  priority: number;
  keepSeconds: number | null;
}

/** Writes these routes and removes those of `withoutRoute` (kinds whose definition has none now). */
export async function writeDeadLetterRoutes(
  db: Db,
  routes: readonly DeadLetterRoute[],
  withoutRoute: readonly string[],
): Promise<void> {
  if (withoutRoute.length > 0)
    await rowsOf(
      db,
      sql`DELETE FROM ${deadLetterRoutes} WHERE kind = ANY(${sql.param(withoutRoute)}::text[]) RETURNING kind`,
    );
  if (routes.length === 0) return;
  await db
    .insert(deadLetterRoutes)
    .values(routes.map((r) => ({ ...r })))
    .onConflictDoUpdate({
      target: deadLetterRoutes.kind,
      set: {
        deadLetter: sql`excluded.dead_letter`,
        maxAttempts: sql`excluded.max_attempts`,
        priority: sql`excluded.priority`,
        keepSeconds: sql`excluded.keep_seconds`,
      },
    });
}

/** Every subscription, by event then kind. */
export async function listSubscriptions(db: Db): Promise<SubscriptionRow[]> {
  return db.select().from(subscriptions).orderBy(subscriptions.event, subscriptions.kind);
}

/** Removes `kind`'s subscription to `event`; whether there was one. */
export async function deleteSubscription(db: Db, kind: string, event: string): Promise<boolean> {
  const rows = await rowsOf<{ kind: string }>(
    db,
    sql`DELETE FROM ${subscriptions} WHERE kind = ${kind} AND event = ${event} RETURNING kind`,
  );
  return rows.length > 0;
}

/** The event that started job `id` (a subscribed kind's), or null. */
export async function startedByOf(db: Db, id: string): Promise<{ id: string; event: string; key: string } | null> {
  const [row] = await rowsOf<{ started_by: unknown }>(
    db,
    sql`SELECT started_by::text AS started_by FROM ${jobs} WHERE id = ${id}::bigint`,
  );
  return typeof row?.started_by === 'string'
    ? (JSON.parse(row.started_by) as { id: string; event: string; key: string })
    : null;
}
