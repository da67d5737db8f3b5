// The claim planner: which kinds the drain claims next and how many, and nothing else. It is the
// one place that knows the claim groups and what each may take:
//   - every kind without a cap is claimed together;
//   - a kind with its own `concurrency` is claimed on its own, never more than its free room (the
//     jobs of it held — claimed, waiting or running — plus its claims in flight stay within the cap),
//     taking turns with the other groups, so a slow kind cannot take every slot;
//   - a claim that comes back short marks its group drained for this drain call; the drain is
//     exhausted when every group is;
//   - far from the database claims grow from batchSize to what the running slots finish in one
//     claim round trip (running averages of both), up to maxBatchSize.
import type { ClaimedJob } from '../queries/index.ts';
import type { JobRegistry } from '../jobs/registry.ts';

export interface PlannedClaim {
  /** The kinds this claim asks for. */
  kinds: readonly string[];
  size: number;
}

export interface ClaimPlannerOptions {
  kinds: readonly string[];
  batchSize: number;
  maxBatchSize: number;
  concurrency: number;
  /** Claimed-but-not-started jobs kept beyond the running ones. */
  prefetch: number;
}

interface ClaimGroup {
  kinds: readonly string[];
  /** Infinity for the group of uncapped kinds. */
  cap: number;
  inFlight: number;
  drained: boolean;
}

/** A handler that takes no measurable time counts as this long when sizing claims. */
const QUICKEST_HANDLER_MS = 0.05;
const average = (previous: number, sample: number) => (Number.isNaN(previous) ? sample : previous * 0.8 + sample * 0.2);

export class ClaimPlanner {
  readonly #options: ClaimPlannerOptions;
  readonly #groups: ClaimGroup[];
  /** Jobs held per capped kind, from their claim until they are settled, released or lost. */
  readonly #held = new Map<string, number>();
  #next = 0;
  #inFlight = 0;
  #handlerMs = Number.NaN;
  #claimMs = Number.NaN;

  constructor(registry: JobRegistry, options: ClaimPlannerOptions) {
    this.#options = options;
    const capOf = (kind: string) => registry.get(kind)?.concurrency;
    const capped = options.kinds.filter((k) => capOf(k) !== undefined);
    const uncapped = options.kinds.filter((k) => capOf(k) === undefined);
    for (const kind of capped) this.#held.set(kind, 0);
    this.#groups = [
      // With no caps at all, the one group asks for exactly the drain's kinds.
      ...(uncapped.length > 0 || capped.length === 0 ? [{ kinds: uncapped.length > 0 ? uncapped : options.kinds, cap: Infinity, inFlight: 0, drained: false }] : []),
      ...capped.map((kind) => ({ kinds: [kind], cap: capOf(kind) as number, inFlight: 0, drained: false })),
    ];
  }

  /** Claims in flight (at most one at a time). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Every group came back short: there is nothing more to claim in this drain. */
  get exhausted(): boolean {
    return this.#groups.every((g) => g.drained);
  }

  /**
   * The claim to send now, given how many jobs the drain holds (waiting and running), or null when
   * none should go: one is in flight, there is no room for a worthwhile batch, or all are drained.
   */
  next(held: number): PlannedClaim | null {
    if (this.#inFlight > 0 || this.exhausted) return null;
    const { batchSize, concurrency, prefetch } = this.#options;
    const batch = this.#batchNow();
    // A grown claim brings its prefetch along (the next claim goes while the slots work through it).
    const ahead = batch > batchSize ? Math.max(prefetch, batch) : prefetch;
    const wanted = Math.min(batch, concurrency + ahead - held);
    if (wanted <= 0) return null;
    // A full batch, or half the capacity when that is smaller: a claim of one or two jobs per round
    // trip would waste the database's time — unless the drain holds nothing at all.
    const minClaim = held === 0 ? 1 : Math.min(batch, Math.ceil((concurrency + ahead) / 2));
    for (let i = 0; i < this.#groups.length; i++) {
      const group = this.#groups[(this.#next + i) % this.#groups.length]!;
      if (group.drained) continue;
      const capped = Number.isFinite(group.cap);
      const size = capped ? Math.min(wanted, group.cap - (this.#held.get(group.kinds[0]!) ?? 0) - group.inFlight) : wanted;
      // A capped kind claims whatever room it has; the rest wait for a worthwhile batch.
      if (capped ? size <= 0 : size < minClaim) continue;
      this.#next = (this.#next + i + 1) % this.#groups.length;
      group.inFlight += size;
      this.#inFlight++;
      return { kinds: group.kinds, size };
    }
    return null;
  }

  /** The claim came back with `jobs` after `roundTripMs` (or failed: `jobs` null). */
  settled(claim: PlannedClaim, jobs: readonly ClaimedJob[] | null, roundTripMs: number): void {
    const group = this.#groupOf(claim);
    this.#inFlight--;
    group.inFlight -= claim.size;
    if (!jobs) return;
    this.#claimMs = average(this.#claimMs, roundTripMs);
    for (const job of jobs) this.#hold(job.kind, 1);
    if (jobs.length < claim.size) group.drained = true;
  }

  /** A job is no longer held: settled, released, or lost before it started. */
  letGo(kind: string): void {
    this.#hold(kind, -1);
  }

  /** A handler succeeded after `ms` (claims grow with quick handlers). */
  handlerTook(ms: number): void {
    this.#handlerMs = average(this.#handlerMs, ms);
  }

  #batchNow(): number {
    const { batchSize, maxBatchSize, concurrency } = this.#options;
    if (maxBatchSize <= batchSize || Number.isNaN(this.#handlerMs) || Number.isNaN(this.#claimMs)) return batchSize;
    return Math.max(batchSize, Math.min(maxBatchSize, Math.ceil((concurrency * this.#claimMs) / Math.max(this.#handlerMs, QUICKEST_HANDLER_MS))));
  }

  #groupOf(claim: PlannedClaim): ClaimGroup {
    return this.#groups.find((g) => g.kinds === claim.kinds)!;
  }

  #hold(kind: string, delta: number): void {
    const n = this.#held.get(kind);
    if (n !== undefined) this.#held.set(kind, n + delta);
  }
}
