// Kinds that subscribe to events (`on`), written to pgdrain.subscriptions so that pgdrain.send_event()
// fans out to them even when no pgdrain process is up (docs/events.md). A drainer writes its
// registry's at start (the sidecar, the Worker once per isolate), and `pgdrain migrate --jobs FILE`
// writes a module's; rows of kinds no longer registered stay until unsubscribed.
import { JOB_DEFAULTS } from '../db/constants.ts';
import {
  type Db,
  type DeadLetterRoute,
  type Subscription,
  deleteSubscription,
  writeDeadLetterRoutes,
  writeSubscriptions,
} from '../queries/index.ts';
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

/** The dead-letter routes of the registry's kinds (`deadLetter`), with the dead-letter kind's
 * options when it is registered too. */
export function deadLetterRoutesOf(registry: JobRegistry): DeadLetterRoute[] {
  return registry.kinds().flatMap((kind) => {
    const deadLetter = registry.get(kind)!.deadLetter;
    if (deadLetter === undefined) return [];
    const target = registry.get(deadLetter);
    return [
      {
        kind,
        deadLetter,
        maxAttempts: target?.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
        priority: target?.priority ?? JOB_DEFAULTS.priority,
        keepSeconds: target?.keepCompletedSeconds || null,
      },
    ];
  });
}

/** Writes the registry's subscriptions and dead-letter routes (a kind of it without `deadLetter`
 * loses its route: the registry is what its kinds are now). Returns how many subscriptions. */
export async function subscribe(db: Db, registry: JobRegistry): Promise<number> {
  const rows = subscriptionsOf(registry);
  await writeSubscriptions(db, rows);
  const routes = deadLetterRoutesOf(registry);
  const routed = new Set(routes.map((r) => r.kind));
  await writeDeadLetterRoutes(
    db,
    routes,
    registry.kinds().filter((k) => !routed.has(k)),
  );
  return rows.length;
}

/** Removes `kind`'s subscription to `event` (a kind retired after a deploy); whether it had one. */
export function unsubscribe(db: Db, kind: string, event: string): Promise<boolean> {
  return deleteSubscription(db, kind, event);
}
