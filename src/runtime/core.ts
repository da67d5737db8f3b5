// What both runtimes wrap, written once: the registry their settings make, the HTTP app's
// configuration, the drain's options, when to drain again, and the housekeeping round. The shells
// keep what is truly theirs: the Worker (src/worker/create-worker.ts) its cron budget, its clock
// and a connection per invocation; the sidecar (src/sidecar/index.ts) LISTEN, its timers and the
// HTTP server.
import type { DrainOptions, DrainReport } from '../drain/index.ts';
import { type HousekeepingRound, housekeep, housekeepAndSchedule } from '../drain/housekeeping.ts';
import type { ApiRuntime } from '../http/context.ts';
import { createDefaultRegistry, type JobDefinition, type JobRegistry } from '../jobs/index.ts';
import { type Db, type KindRow, releaseHeldRuns, replayParkedRuns, writeKinds } from '../queries/index.ts';
import { kindRows } from '../jobs/kind-rows.ts';
import { subscribe } from '../jobs/subscriptions.ts';
import { checkSchedules, type ScheduleDefinition } from '../schedules.ts';
import type { Runtime, Settings } from '../settings.ts';

/** The kinds a runtime serves: the built-in noop and webhook (from the settings' webhook hosts and
 * signing keys) and `jobs`, or `registry` as given; every schedule must name one of its kinds. */
export function registryFor(
  settings: Settings,
  jobs: readonly JobDefinition<any>[],
  schedules: readonly ScheduleDefinition[],
  registry?: JobRegistry,
): JobRegistry {
  const built =
    registry ??
    createDefaultRegistry(
      { WEBHOOK_ALLOWED_HOSTS: settings.webhookAllowedHosts, WEBHOOK_SIGNING_SECRET: settings.webhookSigningSecret },
      jobs,
    );
  checkSchedules(built, schedules);
  return built;
}

/** What registerKinds() did. */
export interface KindsRegistered {
  /** Subscriptions written (kinds' `on`). */
  subscriptions: number;
  /** Kinds whose stored definition this one replaced, and how it differed (a rolling deploy: for
   * the log, once). */
  replaced: { kind: string; writtenBy: string; writtenAt: Date; differences: string[] }[];
  /** Workflow runs held because an earlier deploy's code departed from their history, let go to
   * replay on this one, by kind. */
  released: Record<string, number>;
  /** Parked workflow runs of kinds whose code this deploy changed, replayed once, by kind. */
  replayed: Record<string, number>;
}

/**
 * What a drainer does with its kinds when it comes up — the sidecar at its start, the Worker at its
 * isolate's first look, `pgdrain migrate --jobs`: its kinds written to pgdrain.kinds (the newest
 * definition applies to every enqueue by the kind's name), their subscriptions and dead-letter routes
 * (an event sent from SQL fans out to what is written); the held runs of its workflow kinds let go to
 * replay on this code (a deploy may be the fix: a run that still departs is held again, having run
 * nothing), and, where this deploy changed a workflow's code, its parked runs replayed once.
 */
export async function registerKinds(
  db: Db,
  registry: JobRegistry,
  writtenBy: string,
  {
    replay = true,
  }: { /** false: write the kinds only (`pgdrain migrate --jobs`: the drainers replay). */ replay?: boolean } = {},
): Promise<KindsRegistered> {
  const subscriptions = await subscribe(db, registry);
  const rows = kindRows(registry);
  const before = await writeKinds(db, rows, writtenBy);
  const replaced: KindsRegistered['replaced'] = [];
  const changedCode: { kind: string; versions: number[] }[] = [];
  for (const row of rows) {
    const old = before.get(row.kind);
    if (!old) continue;
    const differences = definitionDifferences(old, row);
    if (differences.length > 0)
      replaced.push({ kind: row.kind, writtenBy: old.writtenBy, writtenAt: old.writtenAt, differences });
    const versions = Object.keys(row.code)
      .filter((v) => old.code[v] !== undefined && old.code[v] !== row.code[v])
      .map(Number);
    if (versions.length > 0 && registry.get(row.kind)?.runner) changedCode.push({ kind: row.kind, versions });
  }
  if (!replay) return { subscriptions, replaced, released: {}, replayed: {} };
  const workflows = registry.kinds().filter((kind) => registry.get(kind)?.runner !== undefined);
  const released = await releaseHeldRuns(db, workflows);
  const replayed = await replayParkedRuns(db, changedCode);
  return { subscriptions, replaced, released, replayed };
}

/** How a kind's stored definition differs from `now`: `maxAttempts 3 → 5`, `code of version 2`. */
function definitionDifferences(stored: KindRow, now: KindRow): string[] {
  const show = (v: unknown) => (v === undefined ? 'unset' : JSON.stringify(v));
  const keys = [...new Set([...Object.keys(stored.options), ...Object.keys(now.options)])].sort();
  const differences = keys
    .filter((k) => JSON.stringify(stored.options[k]) !== JSON.stringify(now.options[k]))
    .map((k) => `${k} ${show(stored.options[k])} → ${show(now.options[k])}`);
  if (stored.version !== now.version) differences.push(`version ${stored.version} → ${now.version}`);
  for (const v of Object.keys(now.code))
    if (stored.code[v] !== undefined && stored.code[v] !== now.code[v]) differences.push(`the code of version ${v}`);
  return differences;
}

/** The HTTP app's configuration that comes from the settings (the shell adds its connections and
 * its hooks). `apiToken`: the sidecar's, when it generated one. */
export function apiConfigFor(
  settings: Settings,
  apiToken = settings.apiToken,
): Pick<
  ApiRuntime,
  'apiToken' | 'metricsToken' | 'scopedTokens' | 'oldestReadyWarnSeconds' | 'recordCounts' | 'maxBodyBytes'
> {
  return {
    apiToken,
    metricsToken: settings.metricsToken,
    scopedTokens: settings.scopedTokens,
    oldestReadyWarnSeconds: settings.oldestReadyWarnSeconds,
    recordCounts: settings.recordCounts !== false,
    maxBodyBytes: settings.maxBodyBytes,
  };
}

/** Where each runtime drains from: the sidecar beside its database, the Worker far from it. */
const PLACEMENT = { sidecar: 'near', worker: 'far' } as const satisfies Record<Runtime, DrainOptions['placement']>;

/** The drain's options from a runtime's settings: every drain of that runtime starts from these. */
export function drainOptionsFor(settings: Settings, runtime: Runtime) {
  return {
    placement: PLACEMENT[runtime],
    batchSize: settings.batchSize,
    maxBatchSize: settings.maxBatchSize,
    concurrency: settings.concurrency,
    kinds: settings.kinds && settings.kinds.length > 0 ? settings.kinds : undefined,
    visibilityTimeoutSeconds: settings.visibilityTimeoutSeconds,
    recordCounts: settings.recordCounts,
  } as const satisfies Partial<DrainOptions>;
}

/**
 * When to drain again after a drain returned (ms since the epoch; null: only when told — a notice,
 * the poll, the cron, the clock): at once when the housekeeping round handed jobs back that the
 * drain did not see (it stopped for lack of work, not for its budget); when a limited kind's
 * limits allow its next claim; when a job the drain settled is due again (`dueAt`: a retry's
 * backoff, a snooze), for a runtime that keeps those times itself. The earliest of them.
 */
export function drainAgainAt(
  report: Pick<DrainReport, 'nextClaimAt' | 'stoppedBy'>,
  also: { handedBack?: number; dueAt?: number | null } = {},
): number | null {
  const times = [
    (also.handedBack ?? 0) > 0 && report.stoppedBy !== 'budget' ? Date.now() : null,
    report.nextClaimAt,
    also.dueAt ?? null,
  ].filter((t): t is number => t !== null && Number.isFinite(t));
  return times.length === 0 ? null : Math.min(...times);
}

export interface HousekeptRound extends HousekeepingRound {
  /** When the next round has something to do; null unless asked for (`scheduleNext`). A round's
   * time, never a job's (a job's is a drain's nextDueAt). */
  nextRoundAt: number | null;
  housekeepingMs: number;
}

/** The housekeeping round (src/drain/housekeeping.ts) with a runtime's settings. `scheduleNext`:
 * also work out when the next one is due (one statement more; the Worker's clock sleeps till then). */
export async function housekeepingRound(
  db: Db,
  settings: Settings,
  options: { scheduleNext: boolean },
): Promise<HousekeptRound> {
  const started = Date.now();
  const visibility = settings.visibilityTimeoutSeconds!;
  const given = { eventRetentionSeconds: settings.eventRetentionSeconds };
  const round = options.scheduleNext
    ? await housekeepAndSchedule(db, visibility, given)
    : { ...(await housekeep(db, visibility, given)), nextRoundAt: null };
  return { ...round, housekeepingMs: Date.now() - started };
}
