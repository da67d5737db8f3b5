// The drain loop, the same for the Worker and the sidecar. One call drains until there is no
// ready work, the budget is spent, or the caller aborts:
//
//   claim a batch (one statement, committed at once)  ──►  local queue (claimed, not started)
//        ▲  when queue + running leave room for a batch           │ a free slot takes the oldest
//        │  (or for half the capacity, if that is smaller)        │
//        │                                                        ▼
//   stop claiming on: a short claim (backlog empty),     running (≤ concurrency handlers, each
//   the budget's deadline, abort, or a claim error        with its timeout and an AbortSignal)
//                                                                 │
//                        success ─► buffered, one DELETE per flush (whatever finished meanwhile)
//                        failure ─► buffered likewise, one UPDATE per flush: retry with backoff, or dead
//   on stop: jobs still in the local queue are released (attempt refunded); handlers already
//   running get until their (budget-clipped) timeout; then every settlement is awaited.
//
// Kinds with their own `concurrency` are claimed apart, in claims no larger than that kind's free
// room (its running + claimed + in-flight jobs stay within its cap), taking turns with the claim
// of every other kind: a slow kind cannot take all the slots, and the others keep draining. A
// claim that comes back short marks its kinds drained for this call; the drain ends when every
// group is drained.
//
// Far from the database (the Worker), two options cut round trips: `mergeSettleAndClaim` sends the
// waiting completions inside the next claim's statement, and `maxBatchSize` lets claims grow to what
// the running slots finish in one claim round trip (quick handlers: large claims; slow: batchSize).
//
// Leases: every `visibility / 3` one statement extends the locks of all the jobs this drain holds
// (claimed, waiting or running), fenced by their lock tokens. A job missing from the answer was
// reaped and claimed elsewhere: its handler is aborted (its settlement would be refused anyway).
// A job whose lease could not be renewed for its whole visibility timeout (the database out of
// reach) is given up the same way: the reaper may already have handed it to someone else.
//
// No transaction is ever held open across a handler. A process that dies anywhere in here leaves
// its jobs `running` with a lock the reaper will expire: never lost.
import { type ClaimedJob, type Db, type Failure, claim, complete, completeAndClaim, failMany, release, renewLeases } from './queries/index.ts';
import { DEFAULT_TIMEOUT_MS, type JobRegistry, PermanentJobError, RetryLaterError, describeIssues } from './jobs/registry.ts';

export interface DrainOptions {
  /** Identifies this process in locked_by (each claim adds a sequence number to it). */
  workerId: string;
  /** Jobs per claim. Default 20: the article's measured sweet spot. */
  batchSize?: number;
  /** Let claims grow up to this many jobs when handlers are quick next to the claim's round trip:
   * a claim then asks for what the running slots finish in about one round trip (measured as it
   * goes), never fewer than batchSize. Default: batchSize (fixed claims). For a drainer far from
   * its database (the Worker) this is what keeps the slots busy at 10-30 ms per round trip. */
  maxBatchSize?: number;
  /** Handlers running at once. Default: batchSize. */
  concurrency?: number;
  /** Claimed-but-not-started jobs to keep ready beyond the running ones, so the next claim's round
   * trip overlaps work. Default: batchSize. Released, attempt refunded, if the drain stops first. */
  prefetch?: number;
  /** Claims running at once, each on its own connection: like that many workers claiming side by
   * side with SKIP LOCKED, so one claim's round trip overlaps another's. Default 1. */
  claimsInFlight?: number;
  /** Claim only these kinds. Default: every kind the registry has a handler for. */
  kinds?: readonly string[];
  /** Claim only these jobs, if ready and free (run-now); the drain ends when they are settled. */
  ids?: readonly string[];
  /** Stop claiming and clip handler timeouts so that the call returns within this. Default: none. */
  budgetMs?: number;
  /** Reserved out of the budget for settling and releasing. Default: 10% of it, at most 1 s. */
  marginMs?: number;
  /** Stop claiming when aborted; in-flight handlers finish (up to their timeout). */
  signal?: AbortSignal;
  /** Count settled jobs in job_counts (the dashboard's chart, /metrics). Default true;
   * RECORD_COUNTS=false turns it off, and the benchmark does to measure what counting costs. */
  recordCounts?: boolean;
  /** Send the completions waiting to be settled with the next claim, in one statement
   * (complete-and-claim.ts): one round trip per cycle instead of two. For a drainer far from its
   * database (the Worker: 1.5× the jobs/s at 10 ms a round trip). Default false: next to the
   * database the separate statements are faster (the merged one is planned each time and returns
   * its rows as JSON, and completions wait for the claim in flight): a churned 50k sidecar drain
   * ran at 8-13k jobs/s merged against 23-39k apart. */
  mergeSettleAndClaim?: boolean;
  /** Called when a settlement statement fails (the jobs stay running for the reaper). */
  onSettleError?: (error: unknown) => void;
  /** The reaper's visibility timeout (a job's own visibility_seconds wins): leases are renewed
   * every third of it. Default DEFAULT_VISIBILITY_SECONDS. */
  visibilitySeconds?: number;
}

/** A running job's lock expires after this unless its drainer renews it (every third of it). */
export const DEFAULT_VISIBILITY_SECONDS = 30;

/** The handler's job was reaped (and maybe claimed elsewhere), or its lease could not be renewed. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

export interface DrainReport {
  claimed: number;
  completed: number;
  /** Failed and scheduled for a retry. */
  failed: number;
  /** Failed for the last time (or permanently). */
  dead: number;
  released: number;
  /** Settlements refused by the lock token: the job had been reaped and re-claimed elsewhere. */
  lost: number;
  elapsedMs: number;
  stoppedBy: 'empty' | 'budget' | 'signal';
}

let claimSequence = 0;

export async function drain(db: Db, registry: JobRegistry, options: DrainOptions): Promise<DrainReport> {
  const started = Date.now();
  const batchSize = Math.max(1, options.batchSize ?? 20);
  const concurrency = Math.max(1, options.concurrency ?? batchSize);
  const prefetch = Math.max(0, options.prefetch ?? batchSize);
  const kinds = options.kinds ?? registry.kinds();
  // Claim size: batchSize, or, when claims may grow, what the slots finish in one claim round trip
  // (running averages of both; a handler that takes no measurable time counts as 0.05 ms).
  const maxBatch = Math.max(batchSize, options.maxBatchSize ?? batchSize);
  let handlerMs = Number.NaN;
  let claimMs = Number.NaN;
  const average = (previous: number, sample: number) => (Number.isNaN(previous) ? sample : previous * 0.8 + sample * 0.2);
  const batchNow = (): number =>
    maxBatch === batchSize || Number.isNaN(handlerMs) || Number.isNaN(claimMs)
      ? batchSize
      : Math.max(batchSize, Math.min(maxBatch, Math.ceil((concurrency * claimMs) / Math.max(handlerMs, 0.05))));
  const maxClaimsInFlight = Math.max(1, options.claimsInFlight ?? 1);
  const budget = options.budgetMs ?? Number.POSITIVE_INFINITY;
  const margin = options.marginMs ?? Math.min(1000, budget * 0.1);
  // Claims stop at `deadline`; handlers already running may go on for half the margin more, and
  // the other half is left for settling.
  const deadline = started + budget - margin;
  const handlerDeadline = started + budget - margin / 2;
  const report: DrainReport = { claimed: 0, completed: 0, failed: 0, dead: 0, released: 0, lost: 0, elapsedMs: 0, stoppedBy: 'empty' };

  // Claim groups: every uncapped kind together, and each kind with a concurrency cap on its own.
  interface ClaimGroup { kinds: readonly string[]; cap: number; inFlight: number; drained: boolean }
  const capOf = (kind: string) => registry.get(kind)?.concurrency;
  const cappedKinds = kinds.filter((k) => capOf(k) !== undefined);
  const uncapped = kinds.filter((k) => capOf(k) === undefined);
  const groups: ClaimGroup[] = [
    ...(uncapped.length > 0 || cappedKinds.length === 0 ? [{ kinds: uncapped, cap: Number.POSITIVE_INFINITY, inFlight: 0, drained: false }] : []),
    ...cappedKinds.map((k) => ({ kinds: [k], cap: capOf(k) as number, inFlight: 0, drained: false })),
  ];
  let nextGroup = 0;
  /** Jobs held (claimed and not yet finished) per capped kind. */
  const held = new Map<string, number>(cappedKinds.map((k) => [k, 0]));
  const hold = (kind: string, delta: number) => {
    const n = held.get(kind);
    if (n !== undefined) held.set(kind, n + delta);
  };

  // Every job this drain holds, from its claim until it is settled or released.
  interface Lease { job: ClaimedJob; renewedAt: number; visibilityMs: number; lose?: (error: LeaseLostError) => void }
  const leases = new Map<string, Lease>();
  const visibilityMs = (options.visibilitySeconds ?? DEFAULT_VISIBILITY_SECONDS) * 1000;
  const loseLease = (lease: Lease, why: string) => {
    leases.delete(lease.job.id);
    const waitingAt = waiting.indexOf(lease.job);
    if (waitingAt >= 0) {
      // Never started: drop it; whoever holds it now runs it.
      waiting.splice(waitingAt, 1);
      hold(lease.job.kind, -1);
      report.lost++;
    }
    lease.lose?.(new LeaseLostError(`job ${lease.job.id}: ${why}`));
  };
  let renewing = false;
  const renewTick = (): void => {
    const now = Date.now();
    for (const lease of leases.values()) {
      if (now - lease.renewedAt >= lease.visibilityMs) loseLease(lease, `its lease could not be renewed for ${lease.visibilityMs / 1000} s; the reaper may have handed it on`);
    }
    if (renewing || leases.size === 0) return;
    renewing = true;
    const sent = [...leases.values()];
    renewLeases(db, sent.map((l) => l.job))
      .then((ids) => {
        const renewed = new Set(ids);
        for (const lease of sent) {
          if (leases.get(lease.job.id) !== lease) continue; // settled meanwhile
          if (renewed.has(lease.job.id)) lease.renewedAt = now;
          else loseLease(lease, 'its lease was lost: the job was reaped and may be running elsewhere');
        }
      })
      .catch(() => {}) // out of reach: the expiry above decides
      .finally(() => {
        renewing = false;
      });
  };
  // The next renewal comes a third of the shortest held visibility after the last (a kind's own
  // visibilitySeconds may be shorter than the default); a claim of a shorter one brings it forward.
  let renewTimer: ReturnType<typeof setTimeout> | undefined;
  let renewDue = Number.POSITIVE_INFINITY;
  let renewStopped = false;
  const scheduleRenewal = (): void => {
    if (renewStopped) return;
    let shortest = visibilityMs;
    for (const lease of leases.values()) shortest = Math.min(shortest, lease.visibilityMs);
    const due = Date.now() + Math.max(100, Math.floor(shortest / 3));
    if (renewTimer !== undefined && due >= renewDue) return;
    clearTimeout(renewTimer);
    renewDue = due;
    renewTimer = setTimeout(() => {
      renewTimer = undefined;
      renewDue = Number.POSITIVE_INFINITY;
      renewTick();
      scheduleRenewal();
    }, due - Date.now());
  };
  scheduleRenewal();

  const waiting: ClaimedJob[] = [];
  const running = new Set<Promise<void>>();
  const settling = new Set<Promise<void>>();
  let backlogEmpty = false;
  let claimError: unknown;
  let wake: () => void = () => {};

  // Every settlement statement is tracked so the drain returns only after all of them; a failed
  // one leaves its jobs running for the reaper.
  const settle = (work: Promise<void>): void => {
    const done = work
      .catch((error: unknown) => options.onSettleError?.(error))
      .finally(() => {
        settling.delete(done);
        wake();
      });
    settling.add(done);
  };
  const settleOptions = { recordCounts: options.recordCounts };
  let claimsInFlight = 0;

  // Successes and failures are each buffered and settled one statement at a time: whatever
  // finished while the previous statement was in flight goes in the next one.
  // While a claim is in flight, completions wait for the next claim to carry them (one round trip
  // for both) instead of going alone; when a claim returns and none follows, they go alone.
  const merge = options.mergeSettleAndClaim === true;
  const completions = settlementBatcher<ClaimedJob>(
    settle,
    (batch) =>
      complete(db, batch, settleOptions).then((ids) => {
        report.completed += ids.length;
        report.lost += batch.length - ids.length;
      }),
    () => merge && claimsInFlight > 0,
  );
  const failures = settlementBatcher<Failure>(settle, (batch) =>
    failMany(db, batch, settleOptions).then((outcomes) => {
      for (const result of outcomes) {
        if (result.outcome === 'retry') report.failed++;
        else if (result.outcome === 'dead') report.dead++;
        else report.lost++;
      }
    }),
  );

  const settleFailure = (job: ClaimedJob, error: unknown): void => {
    leases.delete(job.id);
    failures.add({
      id: job.id,
      lockedBy: job.lockedBy,
      error: describeError(error),
      permanent: error instanceof PermanentJobError,
      retryAfterSeconds: error instanceof RetryLaterError ? error.retryAfterSeconds : undefined,
      backoff: registry.get(job.kind)?.backoff,
    });
  };

  const start = (job: ClaimedJob): void => {
    const lease = leases.get(job.id);
    const startedAt = performance.now();
    const task = runHandler(registry, job, handlerDeadline, (lose) => {
      if (lease) lease.lose = lose;
    }).then(
      () => {
        handlerMs = average(handlerMs, performance.now() - startedAt);
        leases.delete(job.id);
        completions.add(job);
      },
      (error: unknown) => settleFailure(job, error),
    );
    const tracked = task.finally(() => {
      running.delete(tracked);
      hold(job.kind, -1);
      wake();
    });
    running.add(tracked);
  };

  /** The next group to claim for, taking turns, and how many to ask for; null when none may. */
  const nextClaim = (wanted: number, minClaim: number, idleNow: boolean): { group: ClaimGroup; size: number } | null => {
    for (let i = 0; i < groups.length; i++) {
      const group = groups[(nextGroup + i) % groups.length] as ClaimGroup;
      if (group.drained) continue;
      const kind = group.kinds[0];
      const room = Number.isFinite(group.cap) && kind !== undefined ? group.cap - (held.get(kind) ?? 0) - group.inFlight : wanted;
      const size = Math.min(wanted, room);
      // A capped kind claims whatever room it has; the rest wait for a worthwhile batch.
      const worthIt = Number.isFinite(group.cap) ? size > 0 : size >= minClaim || (idleNow && size > 0);
      if (!worthIt) continue;
      nextGroup = (nextGroup + i + 1) % groups.length;
      return { group, size };
    }
    return null;
  };

  const stopReason = (): DrainReport['stoppedBy'] | null =>
    options.signal?.aborted ? 'signal' : Date.now() >= deadline ? 'budget' : null;

  for (;;) {
    const stop = stopReason();
    if (stop) report.stoppedBy = stop;
    const stopping = stop !== null || claimError !== undefined;
    if (!stopping) while (waiting.length > 0 && running.size < concurrency) start(waiting.shift() as ClaimedJob);

    // Claims in flight count as already holding a full batch. A grown claim brings its prefetch
    // along (the next claim is sent while the slots work through this one).
    const batch = batchNow();
    const ahead = batch > batchSize ? Math.max(prefetch, batch) : prefetch;
    const room = concurrency + ahead - waiting.length - running.size - claimsInFlight * batch;
    const wanted = Math.min(batch, room);
    // Claim when a full batch fits, or half the capacity when that is smaller than a batch: a claim
    // of one or two jobs per round trip would waste the database's time.
    const minClaim = Math.min(batch, Math.ceil((concurrency + ahead) / 2));
    const idleNow = waiting.length === 0 && running.size === 0 && claimsInFlight === 0;
    const next = !stopping && !backlogEmpty && claimsInFlight < maxClaimsInFlight && wanted > 0 ? nextClaim(wanted, minClaim, idleNow) : null;
    if (next) {
      const { group, size } = next;
      const lockToken = `${options.workerId}:${++claimSequence}`;
      const claimSentAt = Date.now(); // the lock's time is the claim's, at the latest
      claimsInFlight++;
      group.inFlight += size;
      // One group of every kind and no caps: no filter beyond the caller's own (as ever).
      const claimKinds = groups.length === 1 ? kinds : group.kinds;
      const claimOptions = { batchSize: size, lockToken, kinds: claimKinds, ids: options.ids };
      // Completions waiting for their statement ride with the claim; alone when there are none.
      const riding = merge ? completions.take() : [];
      const claimed =
        riding.length === 0
          ? claim(db, claimOptions)
          : completeAndClaim(db, riding, claimOptions, settleOptions).then(
              (result) => {
                report.completed += result.completed.length;
                report.lost += riding.length - result.completed.length;
                completions.taken();
                return result.claimed;
              },
              (error: unknown) => {
                // Rolled back with the claim: they settle again on their own.
                completions.taken(riding);
                throw error;
              },
            );
      claimed
        .then((jobs) => {
          claimMs = average(claimMs, Date.now() - claimSentAt);
          report.claimed += jobs.length;
          for (const job of jobs) {
            hold(job.kind, 1);
            leases.set(job.id, { job, renewedAt: claimSentAt, visibilityMs: job.visibilitySeconds ? job.visibilitySeconds * 1000 : visibilityMs });
          }
          scheduleRenewal();
          waiting.push(...jobs);
          if (jobs.length < size) {
            group.drained = true;
            backlogEmpty = groups.every((g) => g.drained);
          }
        })
        .catch((error: unknown) => {
          claimError ??= error;
        })
        .finally(() => {
          claimsInFlight--;
          group.inFlight -= size;
          completions.nudge();
          wake();
        });
      continue; // maybe another claim fits
    }

    if (stopping && waiting.length > 0) {
      const unstarted = waiting.splice(0);
      for (const job of unstarted) {
        hold(job.kind, -1);
        leases.delete(job.id);
      }
      settle(
        release(db, unstarted).then((ids) => {
          report.released += ids.length;
          report.lost += unstarted.length - ids.length;
        }),
      );
    }

    const idle = claimsInFlight === 0 && running.size === 0 && waiting.length === 0;
    if (idle && (stopping || backlogEmpty)) break;

    // Sleep until something changes: a handler ends, a claim returns, or the deadline passes.
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    const untilDeadline = Number.isFinite(deadline) && !stopping ? Math.max(0, deadline - Date.now()) : null;
    const timer = untilDeadline === null ? undefined : setTimeout(() => wake(), untilDeadline);
    const onAbort = () => wake();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    await woken;
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
  }

  renewStopped = true;
  clearTimeout(renewTimer);
  completions.flush();
  failures.flush();
  while (settling.size > 0) {
    await Promise.all([...settling]);
    completions.flush();
    failures.flush();
  }
  report.elapsedMs = Date.now() - started;
  if (claimError !== undefined) throw claimError;
  return report;
}

/**
 * Buffers items and settles them with one statement at a time. A flush waits for the next
 * macrotask, so handlers that finish in the same burst share one statement instead of the first
 * going alone; while a statement is in flight, new items wait for the next one. `take()` hands the
 * buffer to another statement (a claim) instead, counting as in flight until `taken()`, which gives
 * back what that statement could not settle; `holdWhile` keeps items for such a statement.
 */
function settlementBatcher<T>(settle: (work: Promise<void>) => void, run: (batch: T[]) => Promise<void>, holdWhile: () => boolean = () => false) {
  let buffer: T[] = [];
  let inFlight = false;
  let scheduled = false;
  const later = (): void => {
    if (scheduled || buffer.length === 0 || holdWhile()) return;
    scheduled = true;
    setTimeout(() => {
      scheduled = false;
      flush();
    }, 0);
  };
  const flush = (): void => {
    if (inFlight || buffer.length === 0) return;
    inFlight = true;
    const batch = buffer;
    buffer = [];
    settle(
      run(batch).finally(() => {
        inFlight = false;
        flush();
      }),
    );
  };
  return {
    take(): T[] {
      if (inFlight || buffer.length === 0) return [];
      inFlight = true;
      const batch = buffer;
      buffer = [];
      return batch;
    },
    taken(unsettled: T[] = []): void {
      buffer = [...unsettled, ...buffer];
      inFlight = false;
      // Not at once: the drain's next claim, decided before the next macrotask, may take them.
      later();
    },
    add(item: T): void {
      buffer.push(item);
      if (!inFlight) later();
    },
    /** Settle what waits, soon, unless it is held or taken first. */
    nudge: later,
    flush,
  };
}

/** Runs one job's handler with the kind's timeout clipped to the drain's deadline. */
async function runHandler(
  registry: JobRegistry,
  job: ClaimedJob,
  deadline: number,
  /** Receives the function that gives the job up when its lease is lost. */
  onLose: (lose: (error: LeaseLostError) => void) => void,
): Promise<void> {
  const definition = registry.get(job.kind);
  if (!definition) throw new PermanentJobError(`no handler is registered for kind ${JSON.stringify(job.kind)}`);
  const parsed = definition.schema.safeParse(job.payload);
  if (!parsed.success) throw new PermanentJobError(`payload rejected by kind ${job.kind}: ${describeIssues(parsed.error)}`);

  const kindTimeout = definition.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const left = deadline - Date.now();
  const timeoutMs = Math.max(0, Math.min(kindTimeout, left));
  const clippedByBudget = left < kindTimeout;
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    onLose((error) => {
      controller.abort(error);
      reject(error);
    });
    timer = setTimeout(() => {
      const error = new Error(
        clippedByBudget
          ? `handler did not finish within the drain's remaining budget of ${timeoutMs} ms`
          : `handler timed out after ${timeoutMs} ms`,
      );
      error.name = 'TimeoutError';
      controller.abort(error);
      reject(error);
    }, timeoutMs);
  });
  try {
    // A handler that ignores its signal is abandoned at the timeout, not awaited forever.
    await Promise.race([Promise.resolve().then(() => definition.handler(parsed.data, { job, signal: controller.signal })), timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/** A readable last_error for anything a handler can throw. */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const message = error.message || '(no message)';
    return error.name && error.name !== 'Error' ? `${error.name}: ${message}` : message;
  }
  if (typeof error === 'string') return error;
  if (error === undefined) return 'handler threw undefined';
  try {
    return `handler threw a non-Error value: ${JSON.stringify(error)}`;
  } catch {
    return `handler threw a non-Error value: ${String(error)}`;
  }
}
