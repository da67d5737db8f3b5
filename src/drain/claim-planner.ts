// The claim planner: which kinds the drain claims next and how many, and nothing else. It is the
// one place that knows the claim groups and what each may take:
//   - every kind without a cap is claimed together;
//   - a kind with its own `concurrency` is claimed on its own, never more than its free room (the
//     jobs of it held — claimed (queued) or running — plus its claims in flight stay within the cap),
//     taking turns with the other groups, so a slow kind cannot take every slot;
//   - a kind with limits across drainers (globalConcurrency, groupConcurrency, rateLimit) is
//     claimed on its own too, through the limited claim (queries/claim-limited.ts), never more than
//     its limit less the jobs of it this drain claimed and has not yet seen settled in the database
//     (until then the database counts them as running), and never more than the drain has free
//     slots for (nothing claimed ahead: a claimed job holds a slot of the limit on every drainer,
//     running or not); when its limits hold ready jobs back, it is
//     blocked — until its rate window lets the next start in, until a settlement of it frees a
//     slot, or for a second (slots held by other drainers) — and the drain does not spin on it;
//   - a claim that comes back short marks its group drained — until something says its kinds may
//     have ready jobs again (a NOTIFY, a completion that made jobs waiting for it pending: reopen())
//     or the poll interval has passed since (reopenDrainedBefore()), so a drain held open by a slow
//     handler still claims what becomes ready meanwhile; the drain is exhausted when every group is;
//   - whenever a slot is free and no claimed job waits for it, a claim of any size goes: a slow
//     handler never keeps the other slots empty;
//   - far from the database claims grow from batchSize to what the running slots finish in one
//     claim round trip (running averages of both), up to maxBatchSize; grown claims may be
//     `claimsInFlight` at a time (the second goes while the first is on its way), with as many
//     batches held ahead.
import type { ClaimedJob, ClaimLimits } from '../queries/index.ts';
import { type JobRegistry, limitsOf } from '../jobs/registry.ts';
import type { JobBook } from './job-record.ts';

export interface PlannedClaim {
  /** The kinds this claim asks for. */
  kinds: readonly string[];
  size: number;
  /** Set for a kind limited across drainers: claimed through the limited claim. */
  limits?: ClaimLimits;
  /** Its group's count of freed slots when the claim was sent (ClaimGroup.freed). */
  freedAtSend?: number;
  /** Its group's count of reopenings when the claim was sent (ClaimGroup.reopened). */
  reopenedAtSend: number;
}

/** What a claim brought back. */
export interface ClaimOutcome {
  jobs: readonly ClaimedJob[];
  /** The kind's limits left ready jobs pending (limited claims only). */
  heldBack?: boolean;
  /** When its rate window lets the next start in, if that is what held them back. */
  nextStartAt?: Date | null;
  /** Asked for (ClaimOptions.nextDue): when the next pending job is due, if the claim came back
   * short (null: none is). */
  nextDueAt?: Date | null;
}

/** A limited kind whose slots other drainers hold is tried again after this long. */
export const BLOCKED_RECHECK_MS = 1_000;

export interface ClaimPlannerOptions {
  kinds: readonly string[];
  batchSize: number;
  maxBatchSize: number;
  concurrency: number;
  /** Claimed-but-not-started jobs kept beyond the running ones. */
  prefetch: number;
  /** Claims in flight at once. */
  claimsInFlight: number;
  /** Completions ride the next claim (far from the database): a second claim waits until claims
   * have grown, so that completions gather on the one in flight instead of going alone. */
  carryCompletions: boolean;
  /** The drain claims only this many jobs in all (run-now's ids): once claimed, nothing more is
   * asked for. */
  claimLimit?: number;
}

interface ClaimGroup {
  kinds: readonly string[];
  /** This drainer's own cap for the kind (its `concurrency`); Infinity when it has none. */
  cap: number;
  limits: ClaimLimits | null;
  inFlight: number;
  drained: boolean;
  /** When its last claim came back short (Date.now()); meaningful while drained. */
  drainedAt: number;
  /** Not claimed before this time (its limits held jobs back); 0 when not blocked. */
  blockedUntil: number;
  /** Blocked by its rate window (only time frees it), not by slots. */
  blockedByRate: boolean;
  /** Settlements of its jobs returned so far (slotFreed): a claim held back by slots while one
   * returned saw the database before that slot was free, and is not a reason to wait. */
  freed: number;
  /** Times something said its kinds may have ready jobs (reopen): a claim that comes back short
   * after one arrived may have read the database before those jobs were there, so its short
   * answer does not drain the group. */
  reopened: number;
}

/** A handler that takes no measurable time counts as this long when sizing claims. */
const QUICKEST_HANDLER_MS = 0.05;
const average = (previous: number, sample: number) => (Number.isNaN(previous) ? sample : previous * 0.8 + sample * 0.2);

export class ClaimPlanner {
  readonly #options: ClaimPlannerOptions;
  readonly #groups: ClaimGroup[];
  /** The jobs the drain holds: per kind, those claimed or running (this drainer's own
   * `concurrency` counts these), and those the database counts as running until their
   * settlement returns (what a limited kind's next claim sees). */
  readonly #book: JobBook;
  /** Kinds claimed apart (their own concurrency or limits). */
  readonly #apart: ReadonlySet<string>;
  #next = 0;
  #inFlight = 0;
  /** Jobs asked for by the claims in flight. */
  #inFlightSize = 0;
  /** Jobs claimed so far. */
  #claimedTotal = 0;
  #handlerMs = Number.NaN;
  #claimMs = Number.NaN;

  constructor(registry: JobRegistry, book: JobBook, options: ClaimPlannerOptions) {
    this.#options = options;
    this.#book = book;
    const capOf = (kind: string) => registry.get(kind)?.concurrency;
    const own = (kind: string) => capOf(kind) !== undefined || limitsOf(registry.get(kind)) !== null;
    const apart = options.kinds.filter(own);
    const together = options.kinds.filter((k) => !own(k));
    this.#apart = new Set(apart);
    const group = (kinds: readonly string[], cap: number, limits: ClaimLimits | null): ClaimGroup => ({
      kinds,
      cap,
      limits,
      inFlight: 0,
      drained: false,
      drainedAt: 0,
      blockedUntil: 0,
      blockedByRate: false,
      freed: 0,
      reopened: 0,
    });
    this.#groups = [
      // With no kind apart, the one group asks for exactly the drain's kinds.
      ...(together.length > 0 || apart.length === 0
        ? [group(together.length > 0 ? together : options.kinds, Infinity, null)]
        : []),
      ...apart.map((kind) => group([kind], capOf(kind) ?? Infinity, limitsOf(registry.get(kind)))),
    ];
  }

  /** Claims in flight. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Every group came back short or is blocked by its limits: nothing more to claim for now. */
  get exhausted(): boolean {
    const now = Date.now();
    return this.#groups.every((g) => g.drained || g.blockedUntil > now);
  }

  /** When the earliest blocked group may be claimed again; Infinity when none is blocked. */
  get nextUnblockAt(): number {
    let next = Infinity;
    for (const g of this.#groups) if (!g.drained && g.blockedUntil > 0) next = Math.min(next, g.blockedUntil);
    return next;
  }

  /** When the group that came back short longest ago did (Infinity: none is drained). */
  get oldestDrainedAt(): number {
    let oldest = Infinity;
    for (const g of this.#groups) if (g.drained) oldest = Math.min(oldest, g.drainedAt);
    return oldest;
  }

  /**
   * The claim to send now, given the jobs the book holds (claimed and queued to start, and
   * running), or null when none should go: as many as may be are in flight, there is no room for a
   * worthwhile batch, or all are drained.
   */
  next(): PlannedClaim | null {
    const { queued, running } = this.#book;
    const held = queued + running;
    if (
      this.#inFlight > 0 &&
      (this.#inFlight >= this.#options.claimsInFlight || (this.#options.carryCompletions && !this.#grown))
    )
      return null;
    if (this.exhausted) return null;
    const { batchSize, concurrency, prefetch, claimsInFlight } = this.#options;
    const batch = this.#batchNow();
    // Grown claims bring their prefetch along: a batch for each claim that may be in flight, so the
    // next claims go while the slots work through the last one.
    const ahead = batch > batchSize ? Math.max(prefetch, batch * claimsInFlight) : prefetch;
    const coming = held + this.#inFlightSize;
    const wanted = Math.min(batch, concurrency + ahead - coming);
    if (wanted <= 0) return null;
    // A full batch, or half the capacity when that is smaller: a claim of one or two jobs per round
    // trip would waste the database's time while claimed jobs wait for slots — but a free slot with
    // nothing claimed for it takes any claim (slow handlers may hold every other slot for long).
    const slotFree = running < concurrency && queued + this.#inFlightSize === 0;
    const minClaim = coming === 0 || slotFree ? 1 : Math.min(batch, Math.ceil((concurrency + ahead) / 2));
    const now = Date.now();
    for (let i = 0; i < this.#groups.length; i++) {
      const group = this.#groups[(this.#next + i) % this.#groups.length]!;
      if (group.drained || group.blockedUntil > now) continue;
      const kind = group.kinds[0]!;
      const apart = group.kinds.length === 1 && this.#apart.has(kind);
      const room =
        Math.min(
          group.cap - this.#book.held(kind),
          (group.limits?.globalConcurrency ?? Infinity) - (group.limits ? this.#book.unsettled(kind) : 0),
        ) - group.inFlight;
      // A kind limited across drainers claims no more than there are free slots to run it now:
      // a job it claimed counts against its limit everywhere, so one held queued here would keep
      // another drainer's free slot from running it.
      const freeSlots = group.limits ? concurrency - coming : Infinity;
      const size = apart ? Math.min(wanted, room, freeSlots) : wanted;
      // A kind claimed apart claims whatever room it has; the rest wait for a worthwhile batch.
      if (apart ? size <= 0 : size < minClaim) continue;
      this.#next = (this.#next + i + 1) % this.#groups.length;
      group.inFlight += size;
      group.blockedUntil = 0;
      this.#inFlight++;
      this.#inFlightSize += size;
      return {
        kinds: group.kinds,
        size,
        reopenedAtSend: group.reopened,
        ...(group.limits ? { limits: group.limits, freedAtSend: group.freed } : {}),
      };
    }
    return null;
  }

  /** The claim came back after `roundTripMs` (or failed: null); the book has its jobs already. */
  claimReturned(claim: PlannedClaim, outcome: ClaimOutcome | null, roundTripMs: number): void {
    const group = this.#groupOf(claim);
    this.#inFlight--;
    this.#inFlightSize -= claim.size;
    group.inFlight -= claim.size;
    if (!outcome) {
      // The claim failed: like a short one, tried again at the next poll.
      group.drained = true;
      group.drainedAt = Date.now();
      return;
    }
    this.#claimMs = average(this.#claimMs, roundTripMs);
    this.#claimedTotal += outcome.jobs.length;
    if (this.#claimedAll) for (const g of this.#groups) g.drained = true;
    if (outcome.jobs.length >= claim.size) return;
    // Jobs were announced while it was on its way: its snapshot may predate them; claim again.
    if (group.reopened !== claim.reopenedAtSend) return;
    if (!outcome.heldBack) {
      group.drained = true;
      group.drainedAt = Date.now();
      return;
    }
    // Held back by slots, but one of ours was freed in the database while the claim was on its way
    // (its snapshot may predate it): claim again at once rather than wait for the recheck.
    if (!outcome.nextStartAt && group.freed !== claim.freedAtSend) return;
    group.blockedByRate = Boolean(outcome.nextStartAt);
    group.blockedUntil = outcome.nextStartAt ? outcome.nextStartAt.getTime() : Date.now() + BLOCKED_RECHECK_MS;
  }

  /** A job of `kind` is done (its settlement returned): it no longer counts as running in the
   * database. A kind blocked by its slots may claim again at once: one of them may be free now. */
  slotFreed(kind: string): void {
    const group = this.#groups.find((g) => g.limits && g.kinds[0] === kind);
    if (!group) return;
    group.freed++;
    if (group.blockedUntil > 0 && !group.blockedByRate) group.blockedUntil = 0;
  }

  /** Jobs of these kinds (any kind: undefined) may be ready now — a NOTIFY announced one, or a
   * completion made jobs waiting for it pending: their groups are worth claiming again. */
  reopen(kinds?: readonly string[]): void {
    if (this.#claimedAll) return;
    for (const group of this.#groups) {
      if (kinds && !group.kinds.some((k) => kinds.includes(k))) continue;
      group.drained = false;
      group.reopened++;
    }
  }

  /** The poll: groups that came back short at or before `time` are worth claiming again (jobs
   * may have become due since, or been enqueued where no notification reaches this drain). */
  reopenDrainedBefore(time: number): void {
    // A drain of given ids (run-now) does not poll: one it did not get is another drainer's.
    if (this.#options.claimLimit !== undefined) return;
    for (const group of this.#groups) if (group.drained && group.drainedAt <= time) group.drained = false;
  }

  /** A handler succeeded after `ms` (claims grow with quick handlers). */
  handlerTook(ms: number): void {
    this.#handlerMs = average(this.#handlerMs, ms);
  }

  /** The drain has every job it may claim (claimLimit). */
  get #claimedAll(): boolean {
    return this.#claimedTotal >= (this.#options.claimLimit ?? Infinity);
  }

  /** Claims have grown past batchSize (handlers are quick next to the round trip). */
  get #grown(): boolean {
    return this.#batchNow() > this.#options.batchSize;
  }

  #batchNow(): number {
    const { batchSize, maxBatchSize, concurrency } = this.#options;
    if (maxBatchSize <= batchSize || Number.isNaN(this.#handlerMs) || Number.isNaN(this.#claimMs)) return batchSize;
    return Math.max(
      batchSize,
      Math.min(maxBatchSize, Math.ceil((concurrency * this.#claimMs) / Math.max(this.#handlerMs, QUICKEST_HANDLER_MS))),
    );
  }

  #groupOf(claim: PlannedClaim): ClaimGroup {
    return this.#groups.find((g) => g.kinds === claim.kinds)!;
  }
}
