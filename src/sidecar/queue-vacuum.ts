// The sidecar's own VACUUM of the jobs table. A claim walks jobs_ready from its head, and every job
// claimed or finished since the last VACUUM leaves a dead entry there that it walks past. Autovacuum
// visits a database at most once a minute, and a queue draining thousands of jobs a second piles up
// hundreds of thousands of such entries in that time: on Debian's 15, five drains of 50k in a row
// slowed from 54k to 22k jobs/s without a VACUUM, and held 45–60k with one after each 50k, each
// VACUUM about 40 ms (bench/NOTES.md). So the drainer counts the jobs it claims and, every
// `everyJobs` of them (more in a large table, below), starts a VACUUM beside the drain
// (vacuumQueueTable(): SKIP_LOCKED, so a VACUUM already running — autovacuum's, another
// drainer's — wins and this one does nothing). Such a lock is looked for first: while another
// session holds one (autovacuum, a VACUUM or ANALYZE, an index build), the drainer does not send its
// VACUUM, keeps its count, and looks again after everyJobs more (onHeldOff).
//
// A VACUUM reads each of the table's indexes whole, so its cost grows with the rows the table holds
// (a million dead-letter jobs kept in it: about 250 ms a VACUUM instead of 40), while what it saves
// grows with the jobs claimed since the last one. So the interval grows with the table: everyJobs
// up to twice that many rows, then sqrt(everyJobs × rows / 2) — the interval at which the claims'
// walk and the VACUUMs cost about the same (vacuumInterval(); at the default, 25,000 jobs up to
// 50,000 rows, 112,000 at a million). The rows are PostgreSQL's estimate (pg_class.reltuples), read
// each time everyJobs more jobs have been claimed.
//
//   counting ──everyJobs claimed──► the table's rows and locks read
//     ├─fewer claimed than its interval──► counting
//     ├─another session's lock in the way──► counting on (looked at again after everyJobs more)
//     └─enough──► vacuuming (in the background; claims go on) ──done or failed──► counting from 0
//                 (a failure is reported and tried again later)
//
// The role must be allowed to VACUUM the table (its owner, a superuser, or MAINTAIN on 17+); the
// first time it is due, it asks once, and a role that is not is reported once and never tries.
import { type Db, mayVacuumQueueTable, queueTableBeforeVacuum, vacuumQueueTable } from '../queries/index.ts';

/** Jobs claimed between two VACUUMs of a jobs table holding `rows` rows, for VACUUM_EVERY_JOBS
 * `everyJobs`. Between two VACUUMs the claims walk about interval / 2 dead entries on average, a
 * cost per job that grows with the interval, while each VACUUM's cost spread over the interval's
 * jobs falls with it and grows with the rows: the sum is least where the two meet, at an interval
 * that grows with the square root of the rows. everyJobs is that point for a table of 2 × everyJobs
 * rows (the benchmark's churned 50k drain, measured), and the floor. */
export function vacuumInterval(everyJobs: number, rows: number): number {
  return Math.max(everyJobs, Math.round(Math.sqrt((everyJobs * Math.max(0, rows)) / 2)));
}

export interface QueueVacuumOptions {
  /** Jobs claimed between two VACUUMs of a table of up to twice as many rows (more for a larger
   * table: vacuumInterval()); 0: never. */
  everyJobs: number;
  /** A VACUUM finished: the jobs claimed since the last one, the table's rows before it, how long it took. */
  onVacuumed?: (done: { claimedSince: number; tableRows: number; ms: number }) => void;
  /** A VACUUM was due, but another session holds a lock it would wait for (autovacuum, a VACUUM or
   * ANALYZE, an index build): not sent; looked at again after everyJobs more. */
  onHeldOff?: (due: { claimedSince: number; tableRows: number }) => void;
  /** The role may not VACUUM the jobs table: said once, and the drainer stops trying. */
  onNotAllowed?: () => void;
  /** A VACUUM (or a read before it) failed; tried again after the next everyJobs. */
  onError?: (error: unknown) => void;
}

export class QueueVacuum {
  readonly #db: Db;
  readonly #options: QueueVacuumOptions;
  #claimedSince = 0;
  /** The count of claimed jobs at which the next look at the table's rows is due. */
  #nextLook: number;
  #allowed: boolean | null = null;
  #running: Promise<void> | null = null;
  #stopped = false;

  constructor(db: Db, options: QueueVacuumOptions) {
    this.#db = db;
    this.#options = options;
    this.#nextLook = options.everyJobs;
  }

  /** A claim took `jobs` jobs. When enough have been claimed and no VACUUM is running, looks at the
   * table's size and starts a VACUUM if its interval has passed. */
  jobsClaimed(jobs: number): void {
    const { everyJobs } = this.#options;
    if (everyJobs <= 0 || this.#allowed === false) return;
    this.#claimedSince += jobs;
    if (this.#claimedSince < this.#nextLook || this.#running || this.#stopped) return;
    this.#running = this.#vacuumIfDue().finally(() => (this.#running = null));
  }

  /** No VACUUM starts after this; resolves when the running one (if any) is done. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
  }

  async #vacuumIfDue(): Promise<void> {
    const { everyJobs } = this.#options;
    // Until told otherwise below: look again after everyJobs more (a failure is tried again then).
    this.#nextLook = this.#claimedSince + everyJobs;
    try {
      if (this.#allowed === null) {
        this.#allowed = await mayVacuumQueueTable(this.#db);
        if (!this.#allowed) {
          this.#options.onNotAllowed?.();
          return;
        }
      }
      const { rows: tableRows, vacuumHeldOff } = await queueTableBeforeVacuum(this.#db);
      const interval = vacuumInterval(everyJobs, tableRows);
      if (this.#claimedSince < interval || this.#stopped) {
        this.#nextLook = Math.min(interval, this.#claimedSince + everyJobs);
        return;
      }
      if (vacuumHeldOff) {
        this.#options.onHeldOff?.({ claimedSince: this.#claimedSince, tableRows: Math.round(tableRows) });
        return;
      }
      const claimedSince = this.#claimedSince;
      this.#claimedSince = 0;
      this.#nextLook = everyJobs;
      const started = performance.now();
      await vacuumQueueTable(this.#db);
      this.#options.onVacuumed?.({
        claimedSince,
        tableRows: Math.round(tableRows),
        ms: Math.round(performance.now() - started),
      });
    } catch (error) {
      this.#options.onError?.(error);
    }
  }
}
