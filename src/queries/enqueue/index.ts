// enqueue / enqueueMany: INSERTs that join the caller's transaction, with pg_notify in the same
// statement, so the wake-up is delivered at COMMIT and never for a rollback. One statement per
// file: insert (the common case), one (a dedupe key, `after` or an enqueue by the kind's name:
// pgdrain.enqueue_job(), which SQL's pgdrain.enqueue() calls too), bulk (a chunk of many);
// columns.ts is the one list of what they write. These store what they are given: validation, the
// kind's settings and tracing are the enqueue pipeline's (src/jobs/enqueue.ts).
import type { Db } from '../db.ts';
import { ENQUEUE_CHUNK, chunkStatement } from './bulk.ts';
import { insertJob } from './insert.ts';
import { enqueueOne } from './one.ts';
import type { EnqueuedJob, NewJob } from './types.ts';

export { ENQUEUE_CHUNK } from './bulk.ts';
export { type DedupeMode, type EnqueuedJob, type NewJob, UnknownDependencyError } from './types.ts';

export async function enqueue(db: Db, job: NewJob): Promise<EnqueuedJob> {
  if (job.dedupeKey === undefined && !(job.after !== undefined && job.after.length > 0) && !job.fromKind)
    return insertJob(db, job);
  return enqueueOne(db, job);
}

/**
 * Inserts many jobs with one statement per chunk of ENQUEUE_CHUNK; all or nothing (more than one
 * chunk run in one transaction). Returns the jobs in input order; an input whose dedupe key matched
 * an existing job (or an earlier input) returns that job. Jobs that replace a keyed job or wait for
 * others go one by one after the others, in input order, and stop at `signal` (rolled back).
 */
export async function enqueueMany(db: Db, input: readonly NewJob[], signal?: AbortSignal): Promise<EnqueuedJob[]> {
  if (input.some(oneByOne)) return db.transaction((tx) => enqueueManyOneByOne(tx, input, signal));
  if (input.length <= ENQUEUE_CHUNK) return chunkStatement(input).run(db);
  return db.transaction(async (tx) => {
    // The next chunk's statement is built while the one before it is on its way.
    const out: EnqueuedJob[] = [];
    let inFlight: Promise<EnqueuedJob[]> | undefined;
    for (let start = 0; start < input.length; start += ENQUEUE_CHUNK) {
      const statement = chunkStatement(input.slice(start, start + ENQUEUE_CHUNK));
      if (inFlight) out.push(...(await inFlight));
      inFlight = statement.run(tx);
      // Awaited above or below; a failure while building the next chunk must not leave it unhandled.
      inFlight.catch(() => {});
    }
    out.push(...(await inFlight!));
    return out;
  });
}

/** Jobs that replace a keyed one or wait for others go one by one (after the others, in input order). */
const oneByOne = (j: NewJob) =>
  (j.dedupeKey !== undefined && j.dedupeMode === 'replace') || (j.after !== undefined && j.after.length > 0);

/** `signal`: checked before each job; aborted, it throws and the caller's transaction rolls back. */
async function enqueueManyOneByOne(tx: Db, input: readonly NewJob[], signal?: AbortSignal): Promise<EnqueuedJob[]> {
  const bulk = await enqueueMany(
    tx,
    input.filter((j) => !oneByOne(j)),
  );
  const out: EnqueuedJob[] = [];
  let next = 0;
  for (const job of input) {
    // 'aborted', as node:http says of a request whose client went away (logged as no server error).
    if (signal?.aborted) throw new Error('aborted', { cause: signal.reason });
    out.push(oneByOne(job) ? await enqueue(tx, job) : bulk[next++]!);
  }
  return out;
}
