// Kinds that subscribe to events (`on`), written to pgdrain.subscriptions so that pgdrain.send_event()
// fans out to them even when no pgdrain process is up (docs/events.md). A drainer writes its
// registry's at start (the sidecar, the Worker once per isolate), and `pgdrain migrate --jobs FILE`
// writes a module's; rows of kinds no longer registered stay until unsubscribed.
import { JOB_DEFAULTS } from '../db/constants.ts';
import { type Db, type Subscription, deleteSubscription, writeSubscriptions } from '../queries/index.ts';
import { eventsOf } from './definition.ts';
import type { JobRegistry } from './registry.ts';

/** The subscriptions of every kind in `registry` that has `on`, with the options its jobs get. */
export function subscriptionsOf(registry: JobRegistry): Subscription[] {
  return registry.kinds().flatMap((kind) => {
    const definition = registry.get(kind)!;
    return eventsOf(definition).map((event) => ({
      event,
      kind,
      maxAttempts: definition.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
      priority: definition.priority ?? JOB_DEFAULTS.priority,
      keepSeconds: definition.keepCompletedSeconds || null,
      visibilitySeconds: definition.visibilityTimeoutSeconds ?? null,
    }));
  });
}

/** Writes the registry's subscriptions (one statement; none: nothing). Returns how many. */
export async function subscribe(db: Db, registry: JobRegistry): Promise<number> {
  const rows = subscriptionsOf(registry);
  await writeSubscriptions(db, rows);
  return rows.length;
}

/** Removes `kind`'s subscription to `event` (a kind retired after a deploy); whether it had one. */
export function unsubscribe(db: Db, kind: string, event: string): Promise<boolean> {
  return deleteSubscription(db, kind, event);
}
