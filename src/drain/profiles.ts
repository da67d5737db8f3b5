// Two ways to drain, by where the drainer runs relative to its database. The sidecar is next to it
// (a round trip well under a millisecond): large claims and separate settlement statements are
// fastest. The Worker is far from it (5-30 ms to Neon): round trips decide, so completions ride the
// next claim's statement and claims grow to what the slots finish in one round trip.
export interface DrainProfile {
  /** Jobs per claim; where claims grow, the least a claim asks for. */
  readonly batchSize: number;
  /** Claims grow up to this when handlers finish quicker than a claim's round trip; null: claims
   * stay at batchSize. */
  readonly maxBatchSize: number | null;
  /** Handlers running at once. */
  readonly concurrency: number;
  /** Completions ride the next claim's statement: one round trip per cycle instead of two. Next to
   * the database the separate statements are faster, far from it the merged one is (the
   * benchmark page, bench/NOTES.md, has both measured). */
  readonly settleWithClaim: boolean;
  /** Claims in flight at once. Far from the database a second claim goes out while the first is on
   * its way, on a connection of its own, so the round trip is paid once for two batches. */
  readonly claimsInFlight: number;
  /** While handlers hold the drain open, a claim that came back short is tried again after this
   * long (jobs come due; on the Worker nothing else announces them). */
  readonly pollIntervalMs: number;
}

export type Placement = 'near' | 'far';

export const DRAIN_PROFILES = {
  // 250 per claim: a claim is one statement, one round trip and one commit whatever its size, so
  // on a deep backlog larger claims cost far less per job; running plus one batch claimed ahead
  // match graphile-worker's tuned local queue of 500. Two claims in flight: the next batch is
  // claimed while the database writes the last one (claims are serialized on a deep backlog
  // otherwise, the drain's slots idle for the length of each).
  near: {
    batchSize: 250,
    maxBatchSize: null,
    concurrency: 250,
    settleWithClaim: false,
    claimsInFlight: 2,
    pollIntervalMs: 1000,
  },
  // 20 per claim at least (the article's measured sweet spot), growing to 500 for quick handlers;
  // 5 handlers and two claims in flight: a Worker invocation holds 6 connections at once, and the
  // drain's database connections take at most two of them (src/worker/database.ts).
  far: {
    batchSize: 20,
    maxBatchSize: 500,
    concurrency: 5,
    settleWithClaim: true,
    claimsInFlight: 2,
    pollIntervalMs: 1000,
  },
} as const satisfies Record<Placement, DrainProfile>;
