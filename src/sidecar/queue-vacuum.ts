// The sidecar's own VACUUM of the jobs table. A claim walks jobs_ready from its head, and every job
// claimed or finished since the last VACUUM leaves a dead entry there that it walks past. Autovacuum
// visits a database at most once a minute, and a queue draining thousands of jobs a second piles up
// hundreds of thousands of such entries in that time: on Debian's 15, five drains of 50k in a row
// slowed from 54k to 22k jobs/s without a VACUUM, and held 45–60k with one after each 50k, each
// VACUUM about 40 ms (docs/benchmark.md). So the drainer counts the jobs it claims and, every
// `everyJobs` of them, starts a VACUUM beside the drain (vacuumQueueTable(): SKIP_LOCKED, so a
// VACUUM already running — autovacuum's, another drainer's — wins and this one does nothing).
//
//   counting ──everyJobs claimed──► vacuuming (in the background; claims go on) ──done or failed──►
//   counting from 0 (a failure is reported and tried again after the next everyJobs)
//
// The role must be allowed to VACUUM the table (its owner, a superuser, or MAINTAIN on 17+); the
// first time it is due, it asks once, and a role that is not is reported once and never tries.
import { type Db, mayVacuumQueueTable, vacuumQueueTable } from '../queries/index.ts';

export interface QueueVacuumOptions {
  /** Jobs claimed between two VACUUMs; 0: never. */
  everyJobs: number;
  /** A VACUUM finished: the jobs claimed since the last one, and how long it took. */
  onVacuumed?: (done: { claimedSince: number; ms: number }) => void;
  /** The role may not VACUUM the jobs table: said once, and the drainer stops trying. */
  onNotAllowed?: () => void;
  /** A VACUUM (or the check before the first) failed; tried again after the next everyJobs. */
  onError?: (error: unknown) => void;
}

export class QueueVacuum {
  readonly #db: Db;
  readonly #options: QueueVacuumOptions;
  #claimedSince = 0;
  #allowed: boolean | null = null;
  #running: Promise<void> | null = null;
  #stopped = false;

  constructor(db: Db, options: QueueVacuumOptions) {
    this.#db = db;
    this.#options = options;
  }

  /** A claim took `jobs` jobs. Starts a VACUUM when enough have been claimed and none is running. */
  jobsClaimed(jobs: number): void {
    const { everyJobs } = this.#options;
    if (everyJobs <= 0 || this.#allowed === false) return;
    this.#claimedSince += jobs;
    if (this.#claimedSince < everyJobs || this.#running || this.#stopped) return;
    const claimedSince = this.#claimedSince;
    this.#claimedSince = 0;
    this.#running = this.#vacuum(claimedSince).finally(() => (this.#running = null));
  }

  /** No VACUUM starts after this; resolves when the running one (if any) is done. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
  }

  async #vacuum(claimedSince: number): Promise<void> {
    try {
      if (this.#allowed === null) {
        this.#allowed = await mayVacuumQueueTable(this.#db);
        if (!this.#allowed) {
          this.#options.onNotAllowed?.();
          return;
        }
      }
      const started = performance.now();
      await vacuumQueueTable(this.#db);
      this.#options.onVacuumed?.({ claimedSince, ms: Math.round(performance.now() - started) });
    } catch (error) {
      this.#options.onError?.(error);
    }
  }
}
