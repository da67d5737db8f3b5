// A drainer's session: what stays the same from one drain to the next, resolved once. The drain
// loop (index.ts) runs in it; the batch runners (batch-runner.ts) claim through it.
import type { OpenTransactionConnection } from '../db/connections.ts';
import { JOB_DEFAULTS } from '../db/constants.ts';
import { batchOf } from '../jobs/batch.ts';
import { type KindRunner, claimName } from '../jobs/definition.ts';
import type { JobRegistry } from '../jobs/registry.ts';
import type { ClaimOptions, ClaimedJob, Db } from '../queries/index.ts';
import { nextLockToken } from './claimer.ts';
import { DueTimes } from './due-times.ts';
import type { DrainNotices } from './notices.ts';
import { DRAIN_PROFILES, type DrainProfile, type Placement } from './profiles.ts';
import type { AttemptFailed } from './settler.ts';

type Prepare = NonNullable<KindRunner['prepare']>;

/** What stays the same from one drain to the next — who drains, which jobs, how many at once, what
 * it hears and whom it tells — given once to a DrainSession. */
export interface DrainSessionOptions {
  /** Identifies this process in locked_by (each claim adds a sequence number to it). */
  workerId: string;
  /** Where this drainer runs relative to its database; picks the profile (profiles.ts) whose
   * defaults fill the sizes below. Default 'near'. */
  placement?: Placement;
  /** Jobs per claim (far: the least a claim asks for). */
  batchSize?: number;
  /** Far: claims grow up to this when handlers are quick next to the claim's round trip. */
  maxBatchSize?: number;
  /** Handlers running at once. */
  concurrency?: number;
  /** Claimed-but-not-started jobs to keep ready beyond the running ones, so the next claim's round
   * trip overlaps work. Default: batchSize. Released, attempt refunded, if the drain stops first. */
  prefetch?: number;
  /** Claim only these kinds. Default: every kind the registry has a handler for. */
  kinds?: readonly string[];
  /** Claim only these jobs, if ready and free (run-now); the drain ends when they are settled. */
  ids?: readonly string[];
  /** Count settled jobs in job_counts (the dashboard's chart, /metrics). Default true. */
  recordCounts?: boolean;
  /** Leases of jobs without a visibility of their own last this long unless renewed (every third
   * of it). Default JOB_DEFAULTS.visibilityTimeoutSeconds (30 s). */
  visibilityTimeoutSeconds?: number;
  /** Claims also say, when they come back short, when the next pending job of the drained kinds
   * is due (in the same statement): DrainReport.nextDueAt. For a drainer that sleeps until then
   * (the Worker's clock). Default false. */
  reportNextDue?: boolean;
  /** A claim took jobs whose leases end at `leaseEndsAt` (ms since the epoch) unless renewed: if
   * this drain is killed, the reaper has them back after that. */
  onLeaseTaken?: (leaseEndsAt: number) => void;
  /** A claim took this many jobs (a batch kind's claims too): the sidecar counts them toward its
   * VACUUM of the jobs table (sidecar/queue-vacuum.ts). */
  onClaimed?: (jobs: number) => void;
  /** Called when a settlement statement fails (the jobs stay running for the reaper). */
  onSettleError?: (error: unknown) => void;
  /** Called for each failed attempt its settlement recorded (retried at `runAt`, or dead): the
   * runtimes say why in their logs. */
  onAttemptFailed?: (failed: AttemptFailed) => void;
  /** Called when a claim fails. The drain goes on with what it holds and claims again at the next
   * poll; if it ends with its last claim failed, it throws that error. */
  onClaimError?: (error: unknown) => void;
  /** Connections for transactional kinds' handlers, each held for one handler's run. Default:
   * transactions on `db` itself (which cannot be cut short when a handler is given up). */
  transactions?: OpenTransactionConnection;
  /** What the runtime hears as it happens (the sidecar's LISTEN): jobs that became ready are
   * claimed at once, even while other handlers keep the drain open, and a cancel of a job held
   * here is checked at once instead of at its next lease renewal. */
  notices?: DrainNotices;
  /** While the drain is open (handlers running) and a claim came back short, it looks again this
   * often for jobs that became due or were enqueued where no notice reaches it. Default: the
   * profile's (1 s). */
  pollIntervalMs?: number;
}

/**
 * A drainer's session, built once and drained in as often as there may be work (drainIn,
 * index.ts): its options resolved against its placement's profile (profiles.ts), the kinds it
 * claims split into the planner's and the batch kinds', the runners that prepare a claim's jobs,
 * the form of its claims and what a claim tells, and the moments jobs its drains settled are due
 * again (retries' backoffs, snoozes: each drain claims them at their time, also those an earlier
 * drain settled). The sidecar keeps one for its life; the Worker one per look.
 */
export class DrainSession {
  readonly db: Db;
  readonly registry: JobRegistry;
  readonly options: DrainSessionOptions;
  readonly profile: DrainProfile;
  readonly batchSize: number;
  readonly maxBatchSize: number;
  readonly concurrency: number;
  readonly prefetch: number;
  readonly pollIntervalMs: number;
  readonly visibilityTimeoutSeconds: number;
  readonly recordCounts: boolean;
  /** The kinds the claim planner claims (every drained kind but the batch kinds). */
  readonly plannedKinds: readonly string[];
  /** The drained batch kinds (src/jobs/batch.ts): each has a runner of its own in a drain. */
  readonly batchKinds: readonly string[];
  /** The drained kinds' versions whose runners prepare a claim's jobs before they start
   * (KindRunner.prepare), by claim name. */
  readonly preparing: ReadonlyMap<string, Prepare>;
  readonly dueTimes = new DueTimes();

  constructor(db: Db, registry: JobRegistry, options: DrainSessionOptions) {
    this.db = db;
    this.registry = registry;
    this.options = options;
    this.profile = DRAIN_PROFILES[options.placement ?? 'near'];
    this.batchSize = Math.max(1, options.batchSize ?? this.profile.batchSize);
    this.maxBatchSize = Math.max(this.batchSize, options.maxBatchSize ?? this.profile.maxBatchSize ?? this.batchSize);
    this.concurrency = Math.max(1, options.concurrency ?? this.profile.concurrency);
    this.prefetch = Math.max(0, options.prefetch ?? this.batchSize);
    this.pollIntervalMs = Math.max(10, options.pollIntervalMs ?? this.profile.pollIntervalMs);
    this.visibilityTimeoutSeconds = options.visibilityTimeoutSeconds ?? JOB_DEFAULTS.visibilityTimeoutSeconds;
    this.recordCounts = options.recordCounts !== false;
    const kinds = options.kinds ?? registry.kinds();
    this.batchKinds = kinds.filter((k) => batchOf(registry.get(k)) !== undefined);
    this.plannedKinds = kinds.filter((k) => !this.batchKinds.includes(k));
    const preparing = new Map<string, Prepare>();
    for (const kind of kinds)
      for (const version of registry.versions(kind)) {
        const prepare = registry.get(kind, version)?.runner?.prepare;
        if (prepare) preparing.set(claimName(kind, version), prepare);
      }
    this.preparing = preparing;
  }

  /** A claim of up to `size` jobs of `kinds` as this session sends it: a lock token of its own (the
   * claim's hold of its jobs, which its settlements are fenced by), its ids, its visibility. */
  claimRequest(size: number, kinds: readonly string[], reportNextDue = false): ClaimOptions {
    return {
      batchSize: size,
      lockToken: nextLockToken(this.options.workerId),
      kinds,
      ids: this.options.ids,
      visibilityTimeoutSeconds: this.visibilityTimeoutSeconds,
      ...(reportNextDue ? { nextDue: { kinds: this.options.kinds } } : {}),
    };
  }

  /** A claim sent at `sentAt` took `jobs`: tells onLeaseTaken when the last of their leases ends
   * unless renewed, and onClaimed how many it took. */
  claimed(jobs: readonly ClaimedJob[], sentAt: number): void {
    if (jobs.length === 0) return;
    const { onLeaseTaken, onClaimed } = this.options;
    if (onLeaseTaken) {
      let longest = 0;
      for (const j of jobs) longest = Math.max(longest, j.visibilityTimeoutSeconds ?? this.visibilityTimeoutSeconds);
      onLeaseTaken(sentAt + longest * 1000);
    }
    onClaimed?.(jobs.length);
  }
}
