// A registry's kinds as the database keeps them (pgdrain.kinds, queries/kinds.ts): each kind's
// highest version's options — those an enqueue by name fills in, and the rest for readers — and a
// hash of each registered version's code (a deploy that changes a workflow's code replays its parked
// runs once: runtime/core.ts registerKinds).
import { textHash } from '../queries/db.ts';
import type { KindRow } from '../queries/index.ts';
import { batchOf } from './batch.ts';
import { kindColumns } from './enqueue.ts';
import { type JobDefinition, eventsOf, versionOf } from './definition.ts';
import type { JobRegistry } from './registry.ts';

/** The options of `definition` that pgdrain.kinds keeps (only those it sets). */
export function kindOptions(definition: JobDefinition<any>): Record<string, unknown> {
  const d = definition;
  const batch = batchOf(d);
  const options: Record<string, unknown> = {
    maxAttempts: d.maxAttempts,
    priority: d.priority,
    keepCompletedSeconds: d.keepCompletedSeconds || undefined,
    visibilityTimeoutSeconds: d.visibilityTimeoutSeconds,
    timeoutMs: d.timeoutMs,
    maxTimeoutMs: d.maxTimeoutMs,
    backoff: d.backoff,
    concurrency: d.concurrency,
    globalConcurrency: d.globalConcurrency,
    groupConcurrency: d.groupConcurrency,
    rateLimit: d.rateLimit,
    fair: d.fair || undefined,
    transactional: d.transactional || undefined,
    eager: d.eager || undefined,
    on: eventsOf(d).length > 0 ? eventsOf(d) : undefined,
    deadLetter: d.deadLetter,
    workflow: (d as { workflow?: boolean }).workflow || undefined,
    batch: batch ? { size: batch.size, waitMs: batch.waitMs } : undefined,
  };
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
}

/** A hash of what a version of a kind runs: a workflow's run, else its handler (the code, as text). */
export function codeHash(definition: JobDefinition<any>): string {
  const run = (definition as { run?: unknown }).run;
  const batch = batchOf(definition);
  const code = typeof run === 'function' ? run : (batch?.handler ?? definition.handler);
  return textHash(`${versionOf(definition)}\n${String(code)}`);
}

/** The rows `registry` writes to pgdrain.kinds: one per kind. */
export function kindRows(registry: JobRegistry): KindRow[] {
  return registry.kinds().map((kind) => {
    const latest = registry.get(kind)!;
    const code: Record<string, string> = {};
    for (const version of registry.versions(kind)) code[String(version)] = codeHash(registry.get(kind, version)!);
    const typed = kindColumns(latest);
    const columns: KindRow['columns'] = { maxAttempts: typed.maxAttempts };
    if (typed.priority !== undefined) columns.priority = typed.priority;
    if (typed.visibilityTimeoutSeconds !== undefined) columns.visibilitySeconds = typed.visibilityTimeoutSeconds;
    if (typed.keepSeconds !== undefined) columns.keepSeconds = typed.keepSeconds;
    return { kind, version: versionOf(latest), columns, options: kindOptions(latest), code };
  });
}
