// The drain's parts on their own, without a database: the book of claimed jobs (each record's
// transitions and the refusals), how an attempt's outcome is sorted (outcome.ts), the settler's
// batching, resends and answers, the lease keeper's renewals, losses and cancels, and the batch
// runner's calls, gathering and release, the one timer of the handlers' deadlines — each given statements (and claims) of the test's own that answer as the database would, and record what was sent. What
// the statements do in PostgreSQL is the conformance suites' (test/conformance/).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type Outcome, outcomeOf, traceName } from '../../src/drain/outcome.ts';
import { BatchRunner, type BatchRunnerDeps } from '../../src/drain/batch-runner.ts';
import { Deadlines } from '../../src/drain/deadlines.ts';
import type { Claimer } from '../../src/drain/claimer.ts';
import { JobBook, type JobRecord } from '../../src/drain/job-record.ts';
import { JobCancelledError, LeaseKeeper, LeaseLostError } from '../../src/drain/lease-keeper.ts';
import { type HandlerEnvironment, HandlerAbandonedError, runAttempt } from '../../src/drain/run-handler.ts';
import { SETTLE_ATTEMPTS, SETTLE_SPACING_MS, type SettlementStatements, Settler } from '../../src/drain/settler.ts';
import { DrainSession } from '../../src/drain/session.ts';
import { defineBatchJob } from '../../src/jobs/batch.ts';
import { JobRegistry, PermanentJobError, RetryLaterError, defineJob } from '../../src/jobs/registry.ts';
import { z } from 'zod';
import type { ClaimedJob, Db, HeldLease } from '../../src/queries/index.ts';
import { sleep, until } from '../support/time.ts';

let nextId = 1;
const job = (over: Partial<ClaimedJob> = {}): ClaimedJob => {
  const id = String(nextId++);
  return {
    id,
    kind: 'k',
    payload: {},
    attempts: 1,
    maxAttempts: 3,
    priority: 0,
    groupKey: null,
    timeoutMs: null,
    runAt: new Date(),
    lockedBy: `test:${id}`,
    visibilityTimeoutSeconds: null,
    traceparent: null,
    createdAt: new Date(),
    version: null,
    ...over,
  };
};
/** No statement reaches it: every part under test is given its own statements. */
const NO_DB = {} as Db;

describe('the book of claimed jobs', () => {
  it('a job goes claimed → running → settling → done, counted by how it settled', () => {
    const done: string[] = [];
    const book = new JobBook({ onDone: (kind) => done.push(kind) });
    const [a, b] = book.claimed([job(), job({ kind: 'other' })], Date.now());
    expect([book.queued, book.running, book.live, book.held('k'), book.held('other')]).toEqual([2, 0, 2, 1, 1]);
    expect(book.nextQueued()).toBe(a);
    a!.start();
    expect([a!.state, book.queued, book.running, book.held('k')]).toEqual(['running', 1, 1, 1]);
    a!.finish('completed');
    expect([a!.state, a!.outcome, book.running, book.held('k'), book.unsettled('k')]).toEqual([
      'settling',
      'completed',
      0,
      0,
      1,
    ]);
    a!.settled('completed');
    expect([a!.state, book.live, book.unsettled('k'), book.counts.completed, done]).toEqual(['done', 1, 0, 1, ['k']]);
    expect(b!.state).toBe('claimed');
  });

  it('refuses every move that does not come from where it must', () => {
    const book = new JobBook();
    const [a] = book.claimed([job()], Date.now());
    expect(() => a!.finish('completed')).toThrow(/cannot go from claimed to settling/);
    expect(() => a!.settled('completed')).toThrow(/cannot go from claimed to done/);
    a!.start();
    expect(() => a!.start()).toThrow(/cannot go from running to running/);
    expect(() => a!.forget()).toThrow(/cannot go from running to done/);
    a!.finish('failed');
    expect(() => a!.finish('failed')).toThrow(/cannot go from settling to settling/);
    a!.settled('failed');
    expect(() => a!.settled('failed')).toThrow(/cannot go from done to done/);
    expect(book.counts).toMatchObject({ failed: 1, completed: 0 });
  });

  it('a job that never started may be released, cancelled or forgotten (lost); a failed statement counts as unsettled', () => {
    const book = new JobBook();
    const [released, cancelled, lost, unsettled] = book.claimed([job(), job(), job(), job()], Date.now());
    expect(book.takeQueued()).toEqual([released, cancelled, lost, unsettled]);
    expect(book.queued).toBe(0);
    released!.finish('released');
    released!.settled('released');
    cancelled!.finish('cancelled');
    cancelled!.settled('cancelled');
    lost!.forget();
    unsettled!.start();
    unsettled!.finish('completed');
    unsettled!.settled(null);
    expect(book.counts).toEqual({
      completed: 0,
      failed: 0,
      dead: 0,
      released: 1,
      cancelled: 1,
      lost: 1,
      snoozed: 0,
      unsettled: 1,
    });
    expect([book.live, book.held('k'), book.unsettled('k')]).toEqual([0, 0, 0]);
  });
});

describe("an attempt's outcome", () => {
  const ends = (j: ClaimedJob, error: unknown): [Outcome['as'], string] => {
    const end = outcomeOf(j, error);
    return [end.as, traceName(end)];
  };

  it('sorts each way an attempt gives up into what the drain does with its job', () => {
    const j = job({ attempts: 1, maxAttempts: 3 });
    expect(ends(j, new HandlerAbandonedError('shut down'))).toEqual(['released', 'released']);
    expect(ends(j, new JobCancelledError('asked to'))).toEqual(['cancelled', 'cancelled']);
    expect(ends(j, new LeaseLostError('reaped'))).toEqual(['lost', 'lost']);
    expect(ends(j, new Error('boom'))).toEqual(['failed', 'retry']);
    expect(ends(j, 'not even an Error')).toEqual(['failed', 'retry']);
    expect(ends(j, new RetryLaterError('later', 5))).toEqual(['failed', 'retry']);
  });

  it('a failure is dead when it is permanent or the last attempt', () => {
    expect(ends(job({ attempts: 1, maxAttempts: 3 }), new PermanentJobError('never'))).toEqual(['failed', 'dead']);
    expect(ends(job({ attempts: 3, maxAttempts: 3 }), new Error('boom'))).toEqual(['failed', 'dead']);
    expect(outcomeOf(job(), new RetryLaterError('later', 5))).toMatchObject({
      error: 'RetryLaterError: later',
      permanent: false,
      retryAfterSeconds: 5,
    });
  });
});

/** Settlement statements that answer as the database would and record what they were sent. */
function fakeStatements(answer: { lost?: Set<string>; fail?: () => unknown; retryAt?: Date } = {}) {
  const sent: { statement: string; ids: string[]; extra?: unknown }[] = [];
  const kept = (ids: string[]) => ids.filter((id) => !answer.lost?.has(id));
  const maybeFail = () => {
    const error = answer.fail?.();
    if (error) throw error;
  };
  const statements: SettlementStatements = {
    completeJobs: async (_db, held) => {
      sent.push({ statement: 'complete', ids: held.map((h) => h.id) });
      maybeFail();
      return { ended: kept(held.map((h) => h.id)).map((id) => ({ id, status: 'completed' })), unblockedKinds: [] };
    },
    completeFollowed: async (_db, held) => {
      sent.push({ statement: 'completeFollowed', ids: held.map((h) => h.id) });
      return { ended: held.map((h) => ({ id: h.id, status: 'completed' })), unblockedKinds: [] };
    },
    failJobs: async (_db, failures) => {
      sent.push({
        statement: 'fail',
        ids: failures.map((f) => f.id),
        extra: failures.map((f) => ({ permanent: f.permanent, retryAfterSeconds: f.retryAfterSeconds })),
      });
      maybeFail();
      return {
        outcomes: failures.map((f) =>
          answer.lost?.has(f.id)
            ? { outcome: 'lost' as const }
            : f.permanent
              ? { outcome: 'dead' as const, attempts: 1 }
              : { outcome: 'retry' as const, runAt: answer.retryAt ?? new Date(), attempts: 1 },
        ),
        unblockedKinds: [],
      };
    },
    release: async (_db, held, reason) => {
      sent.push({ statement: 'release', ids: held.map((h) => h.id), extra: reason });
      return kept(held.map((h) => h.id));
    },
  };
  return { statements, sent };
}

/** A settler over `statements`, with what it reports: errors of statements that failed. */
function settlerOver(
  statements: SettlementStatements,
  options: {
    onRetry?: (at: Date, kind: string) => void;
    resendUntil?: () => number;
    handlersRunning?: () => boolean;
  } = {},
) {
  const errors: unknown[] = [];
  const settler = new Settler(NO_DB, {
    recordCounts: true,
    carryCompletions: false,
    statements,
    onError: (e) => errors.push(e),
    ...options,
  });
  return { settler, errors };
}

/** Records claimed and started, as the drain hands them to the settler. */
const running = (book: JobBook, n: number): JobRecord[] => {
  const records = book.claimed(
    Array.from({ length: n }, () => job()),
    Date.now(),
  );
  for (const r of records) {
    book.nextQueued();
    r.start();
  }
  return records;
};

describe('the settler', () => {
  it('jobs that finish in one burst share one completing statement; a job the answer leaves out was lost', async () => {
    const book = new JobBook();
    const [a, b, c] = running(book, 3);
    const { statements, sent } = fakeStatements({ lost: new Set([c!.job.id]) });
    const { settler } = settlerOver(statements);
    settler.complete(a!);
    settler.complete(b!);
    settler.complete(c!);
    expect(settler.busy).toBe(true);
    await settler.finish();
    expect(sent).toEqual([{ statement: 'complete', ids: [a!.job.id, b!.job.id, c!.job.id] }]);
    expect(book.counts).toMatchObject({ completed: 2, lost: 1 });
    expect(settler.busy).toBe(false);
  });

  it(`while other handlers run, completions after a statement wait up to ${SETTLE_SPACING_MS} ms to share the next; alone, limited or at finish() they go at once`, async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    try {
      const book = new JobBook();
      const [a, b, c, d, e, f] = running(book, 6);
      const { statements, sent } = fakeStatements();
      let othersRunning = true;
      const { settler } = settlerOver(statements, { handlersRunning: () => othersRunning });
      const ids = () => sent.map((s) => s.ids);
      // The first after a quiet spell goes out at the next macrotask.
      settler.complete(a!);
      await vi.advanceTimersByTimeAsync(0);
      expect(ids()).toEqual([[a!.job.id]]);
      // The next two, a few milliseconds apart, wait for the spacing and share one statement.
      await vi.advanceTimersByTimeAsync(2);
      settler.complete(b!);
      await vi.advanceTimersByTimeAsync(5);
      settler.complete(c!);
      await vi.advanceTimersByTimeAsync(SETTLE_SPACING_MS - 9);
      expect(ids()).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(2);
      expect(ids()).toEqual([[a!.job.id], [b!.job.id, c!.job.id]]);
      // A job of a kind limited across drainers holds a slot of the limit while running: at once.
      await vi.advanceTimersByTimeAsync(1);
      const limited = defineJob({ kind: 'k', schema: z.object({}), globalConcurrency: 2, handler: () => {} });
      settler.settle(d!, { as: 'completed' }, limited);
      await vi.advanceTimersByTimeAsync(0);
      expect(ids()).toHaveLength(3);
      // No other handler running: nothing would join it, so it goes at once (a chain is not slowed).
      othersRunning = false;
      await vi.advanceTimersByTimeAsync(1);
      settler.complete(e!);
      await vi.advanceTimersByTimeAsync(0);
      expect(ids()).toHaveLength(4);
      // finish() sends what waits at once.
      othersRunning = true;
      await vi.advanceTimersByTimeAsync(1);
      settler.complete(f!);
      await settler.finish();
      expect(ids()).toEqual([[a!.job.id], [b!.job.id, c!.job.id], [d!.job.id], [e!.job.id], [f!.job.id]]);
      expect(book.counts).toMatchObject({ completed: 6 });
    } finally {
      vi.useRealTimers();
    }
  });

  it('a failure says whether it is permanent and when to retry at the soonest; retries are told with their time', async () => {
    const book = new JobBook();
    const [a, b] = running(book, 2);
    const retryAt = new Date(Date.now() + 60_000);
    const { statements, sent } = fakeStatements({ retryAt });
    const retries: [Date, string][] = [];
    const { settler } = settlerOver(statements, { onRetry: (at, kind) => retries.push([at, kind]) });
    settler.settle(a!, outcomeOf(a!.job, new RetryLaterError('rate limited', 30)), undefined);
    settler.settle(b!, outcomeOf(b!.job, new PermanentJobError('bad input')), undefined);
    await settler.finish();
    expect(sent).toEqual([
      {
        statement: 'fail',
        ids: [a!.job.id, b!.job.id],
        extra: [
          { permanent: false, retryAfterSeconds: 30 },
          { permanent: true, retryAfterSeconds: undefined },
        ],
      },
    ]);
    expect(book.counts).toMatchObject({ failed: 1, dead: 1 });
    expect(retries).toEqual([[retryAt, 'k']]);
  });

  it(`a statement rolled back by a lock conflict is sent again, ${SETTLE_ATTEMPTS} times in all; then its jobs are left to the reaper`, async () => {
    const book = new JobBook();
    const [a] = running(book, 1);
    let conflicts = 1;
    const { statements, sent } = fakeStatements({
      fail: () => (conflicts-- > 0 ? Object.assign(new Error('deadlock detected'), { code: '40P01' }) : null),
    });
    const { settler, errors } = settlerOver(statements);
    settler.complete(a!);
    await settler.finish();
    expect(sent).toHaveLength(2);
    expect(book.counts.completed).toBe(1);

    const [b] = running(book, 1);
    conflicts = Number.POSITIVE_INFINITY;
    settler.complete(b!);
    await settler.finish();
    expect(sent).toHaveLength(2 + SETTLE_ATTEMPTS);
    expect(errors).toHaveLength(1);
    expect([b!.state, book.counts.completed, book.live]).toEqual(['done', 1, 0]);
  });

  it('a failure of the moment (the database out of reach, a full disk) is sent again until resendUntil: a blip repeats no work', async () => {
    const book = new JobBook();
    const [a] = running(book, 1);
    let down = 2;
    const { statements, sent } = fakeStatements({
      fail: () =>
        down-- > 0 ? Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }) : null,
    });
    const { settler, errors } = settlerOver(statements, { resendUntil: () => Date.now() + 10_000 });
    settler.complete(a!);
    await settler.finish();
    expect([sent.length, errors.length, book.counts.completed]).toEqual([3, 0, 1]);

    // Still failing when the time is up (the jobs' lease): left to the reaper, as before.
    const [b] = running(book, 1);
    const disk = () => Object.assign(new Error('could not extend file: No space left on device'), { code: '53100' });
    const full = fakeStatements({ fail: disk });
    const over = settlerOver(full.statements, { resendUntil: () => Date.now() + 300 });
    over.settler.complete(b!);
    await over.settler.finish();
    expect(full.sent.length).toBeGreaterThan(1);
    expect([over.errors.length, b!.state, book.counts.completed]).toEqual([1, 'done', 1]);
  });

  it('any other error is not sent again: the jobs stay running in the database for the reaper, done here (unsettled)', async () => {
    const book = new JobBook();
    const [a] = running(book, 1);
    const { statements, sent } = fakeStatements({
      fail: () => Object.assign(new Error('column "x" does not exist'), { code: '42703' }),
    });
    const { settler, errors } = settlerOver(statements, { resendUntil: () => Date.now() + 10_000 });
    settler.complete(a!);
    await settler.finish();
    expect([sent.length, errors.length, a!.state]).toEqual([1, 1, 'done']);
    expect(book.counts).toEqual({
      completed: 0,
      failed: 0,
      dead: 0,
      released: 0,
      cancelled: 0,
      lost: 0,
      snoozed: 0,
      unsettled: 1,
    });
  });

  it('a release goes at once with its reason; a handler that settled its job itself needs no statement', async () => {
    const book = new JobBook();
    const [a, b, c] = book.claimed([job(), job(), job()], Date.now());
    const { statements, sent } = fakeStatements({ lost: new Set([b!.job.id]) });
    const { settler } = settlerOver(statements);
    book.takeQueued();
    settler.release([a!, b!], 'the drainer stopped');
    c!.start();
    settler.snoozed(c!);
    await settler.finish();
    expect(sent).toEqual([{ statement: 'release', ids: [a!.job.id, b!.job.id], extra: 'the drainer stopped' }]);
    expect(book.counts).toMatchObject({ released: 1, lost: 1, snoozed: 1 });
  });
});

describe('the lease keeper', () => {
  const keepers: LeaseKeeper[] = [];
  afterEach(() => {
    for (const k of keepers.splice(0)) k.stop();
  });

  /** A keeper whose renewals answer with `answer(held)`; records what each renewal held. */
  function keeper(answer: (held: readonly HeldLease[]) => { id: string; cancelRequested: boolean }[]) {
    const renewals: string[][] = [];
    const lostUnstarted: [string, string][] = [];
    const k = new LeaseKeeper(NO_DB, {
      visibilityTimeoutSeconds: 30,
      onLostUnstarted: (record, error) => lostUnstarted.push([record.job.id, error.name]),
      renew: async (held) => {
        renewals.push(held.map((h) => h.id));
        return answer(held);
      },
    });
    keepers.push(k);
    return { k, renewals, lostUnstarted };
  }

  it('a job the renewal answers without was reaped: a running handler is given up, an unstarted job reported', async () => {
    const book = new JobBook();
    const [started, unstarted, kept] = book.claimed([job(), job(), job()], Date.now());
    const { k, renewals, lostUnstarted } = keeper((held) =>
      held.filter((h) => h.id === kept!.job.id).map((h) => ({ id: h.id, cancelRequested: false })),
    );
    k.hold([started!, unstarted!, kept!]);
    const givenUp: Error[] = [];
    k.attach(started!.job.id, (e) => givenUp.push(e));
    k.checkNow(started!.job.id);
    await until(() => renewals.length === 1 && givenUp.length === 1 && lostUnstarted.length === 1);
    expect(renewals[0]).toEqual([started!.job.id, unstarted!.job.id, kept!.job.id]);
    expect(givenUp[0]).toBeInstanceOf(LeaseLostError);
    expect(lostUnstarted).toEqual([[unstarted!.job.id, 'LeaseLostError']]);
    // The kept one is renewed again; the lost ones are not.
    k.checkNow(kept!.job.id);
    await until(() => renewals.length === 2);
    expect(renewals[1]).toEqual([kept!.job.id]);
  });

  it('a cancel the renewal reports gives the handler up as cancelled; a job settling itself is left out', async () => {
    const book = new JobBook();
    const [cancelled, settling] = book.claimed([job(), job()], Date.now());
    const { k, renewals } = keeper((held) =>
      held.map((h) => ({ id: h.id, cancelRequested: h.id === cancelled!.job.id })),
    );
    k.hold([cancelled!, settling!]);
    const givenUp: Error[] = [];
    k.attach(cancelled!.job.id, (e) => givenUp.push(e));
    const settled = k.holdForSettling(settling!.job.id);
    k.checkNow(cancelled!.job.id);
    await until(() => givenUp.length === 1);
    expect(givenUp[0]).toBeInstanceOf(JobCancelledError);
    expect(renewals[0]).toEqual([cancelled!.job.id]);
    settled();
    k.checkNow(settling!.job.id);
    await until(() => renewals.length === 2);
    expect(renewals[1]).toEqual([settling!.job.id]);
  });

  it('a renewal on its way when the handler began to settle the job itself does not call it lost', async () => {
    const book = new JobBook();
    const [a] = book.claimed([job()], Date.now());
    let answer: (rows: { id: string; cancelRequested: boolean }[]) => void = () => {};
    const k = new LeaseKeeper(NO_DB, {
      visibilityTimeoutSeconds: 30,
      onLostUnstarted: () => {},
      renew: () => new Promise((resolve) => (answer = resolve)),
    });
    keepers.push(k);
    k.hold([a!]);
    const givenUp: Error[] = [];
    k.attach(a!.job.id, (e) => givenUp.push(e));
    k.checkNow(a!.job.id);
    await sleep(20); // the renewal is on its way
    k.holdForSettling(a!.job.id);
    answer([]); // it reached the database after the handler's own statement settled the job
    await sleep(20);
    expect(givenUp).toEqual([]);
  });

  it('a lease that cannot be renewed for its whole visibility is given up then, not at a later renewal', async () => {
    const book = new JobBook();
    const [a] = book.claimed([job({ visibilityTimeoutSeconds: 0.3 })], Date.now());
    const k = new LeaseKeeper(NO_DB, {
      visibilityTimeoutSeconds: 30,
      onLostUnstarted: () => {},
      renew: () => Promise.reject(new Error('the database is out of reach')),
    });
    keepers.push(k);
    k.hold([a!]);
    const givenUp: Error[] = [];
    k.attach(a!.job.id, (e) => givenUp.push(e));
    await sleep(150);
    expect(givenUp).toEqual([]);
    await until(() => givenUp.length === 1, Boolean, 2_000);
    expect(givenUp[0]).toBeInstanceOf(LeaseLostError);
    expect(givenUp[0]!.message).toMatch(/could not be renewed for 0.3 s/);
  });

  it('shutting down gives up every running handler with its error; a dropped job is renewed no more', async () => {
    const book = new JobBook();
    const [a, b, c] = book.claimed([job(), job(), job()], Date.now());
    const { k, renewals } = keeper((held) => held.map((h) => ({ id: h.id, cancelRequested: false })));
    k.hold([a!, b!, c!]);
    const givenUp: [string, Error][] = [];
    k.attach(a!.job.id, (e) => givenUp.push([a!.job.id, e]));
    k.attach(b!.job.id, (e) => givenUp.push([b!.job.id, e]));
    k.drop(b!.job.id);
    const abandoned = new HandlerAbandonedError('the drainer shut down');
    k.abandonRunning(abandoned);
    expect(givenUp).toEqual([[a!.job.id, abandoned]]);
    k.checkNow(c!.job.id);
    await until(() => renewals.length === 1);
    expect(renewals[0]).toEqual([c!.job.id]);
  });
});

describe("the handlers' deadlines", () => {
  afterEach(() => vi.useRealTimers());

  it('fires each deadline once, in order, at its time, under one timer', () => {
    vi.useFakeTimers();
    const d = new Deadlines();
    const fired: string[] = [];
    const t0 = Date.now();
    for (const [name, ms] of [
      ['c', 300],
      ['a', 100],
      ['b', 200],
      ['a2', 100],
    ] as const)
      d.add(t0 + ms, () => fired.push(`${name}@${Date.now() - t0}`));
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(99);
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(fired.sort()).toEqual(['a2@100', 'a@100']);
    vi.advanceTimersByTime(250);
    expect(fired.slice(2)).toEqual(['b@200', 'c@300']);
    expect(d.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('never fires a cancelled deadline, and arms no timer again once none waits', () => {
    vi.useFakeTimers();
    const d = new Deadlines();
    const fired: number[] = [];
    const entries = Array.from({ length: 500 }, (_, i) => d.add(Date.now() + 1_000 + i, () => fired.push(i)));
    // Most attempts end first: the heap is rebuilt from the ones still waiting.
    for (const [i, e] of entries.entries()) if (i % 10 !== 0) e.cancel();
    entries[10]!.cancel();
    entries[10]!.cancel(); // twice is once
    expect(d.size).toBe(49);
    vi.advanceTimersByTime(2_000);
    expect(fired).toEqual(Array.from({ length: 50 }, (_, k) => k * 10).filter((i) => i !== 10));
    const last = d.add(Date.now() + 50, () => fired.push(-1));
    last.cancel();
    vi.advanceTimersByTime(100);
    expect(fired).not.toContain(-1);
    // The timer armed for it fired on nothing and was not armed again.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('clear() drops the timer and every deadline (the drain ended)', () => {
    vi.useFakeTimers();
    const d = new Deadlines();
    const fired: number[] = [];
    const kept = d.add(Date.now() + 100, () => fired.push(1));
    d.add(Date.now() + 200, () => fired.push(2));
    d.clear();
    expect(vi.getTimerCount()).toBe(0);
    kept.cancel(); // an attempt ending after the clear changes nothing
    expect(d.size).toBe(0);
    vi.advanceTimersByTime(300);
    expect(fired).toEqual([]);
  });

  it("a kind's runner (KindRunner) resolves to the attempt's outcome: completed, snoozed, failed; it gets what it prepared", async () => {
    const environment: HandlerEnvironment = {
      db: NO_DB,
      progress: () => {},
      unsavedProgress: () => undefined,
      saveProgress: async () => {},
      holdForSettling: () => () => {},
      recordCounts: false,
      deadlines: new Deadlines(),
    };
    const seen: unknown[] = [];
    const runs = defineJob<{ end: 'done' | 'park' | 'throw' }>({
      kind: 'runs',
      schema: z.object({ end: z.enum(['done', 'park', 'throw']) }),
      keepCompletedSeconds: 60,
      handler: () => {
        throw new Error('not called: the runner runs the attempts');
      },
      runner: {
        attempt: async ({ end }, _ctx, runtime) => {
          seen.push(runtime.prepared);
          if (end === 'throw') throw new PermanentJobError('refused');
          return end === 'park' ? { snoozed: { dueAt: 42, readyKinds: ['child'] } } : { completed: { ok: true } };
        },
      },
    });
    const registry = new JobRegistry([runs]);
    const deadline = Date.now() + 60_000;
    const attempt = (end: string, prepared?: unknown) =>
      runAttempt(
        registry,
        job({ kind: 'runs', payload: { end } }),
        deadline,
        environment,
        () => {},
        undefined,
        prepared,
      );
    expect(await attempt('done', 'ahead')).toEqual({
      as: 'completed',
      kept: { keepSeconds: 60, resultJson: '{"ok":true}' },
    });
    expect(await attempt('park')).toEqual({ as: 'snoozed', dueAt: 42, readyKinds: ['child'] });
    expect(await attempt('throw')).toMatchObject({ as: 'failed', permanent: true, dead: true });
    expect(await attempt('neither')).toMatchObject({
      as: 'failed',
      permanent: true,
      error: expect.stringMatching(/payload rejected/),
    });
    expect(seen).toEqual(['ahead', undefined, undefined]);
    expect(environment.deadlines.size).toBe(0);
  });

  it("a handler's signal read only after its timeout is already aborted with the timeout", async () => {
    const environment: HandlerEnvironment = {
      db: NO_DB,
      progress: () => {},
      unsavedProgress: () => undefined,
      saveProgress: async () => {},
      holdForSettling: () => () => {},
      recordCounts: false,
      deadlines: new Deadlines(),
    };
    let late: AbortSignal | undefined;
    let early: AbortSignal | undefined;
    const registry = new JobRegistry([
      defineJob({
        kind: 'late',
        schema: z.unknown(),
        timeoutMs: 100,
        handler: async (_p, ctx) => {
          await sleep(250);
          late = ctx.signal; // made now, after the attempt was given up
        },
      }),
      defineJob({
        kind: 'early',
        schema: z.unknown(),
        timeoutMs: 100,
        handler: async (_p, ctx) => {
          early = ctx.signal; // made at the start, aborted by the deadline
          await sleep(250);
        },
      }),
    ]);
    const deadline = Date.now() + 60_000;
    for (const kind of ['late', 'early'])
      expect(await runAttempt(registry, job({ kind }), deadline, environment, () => {})).toMatchObject({
        as: 'failed',
        thrown: { name: 'TimeoutError', message: 'handler timed out after 100 ms' },
      });
    await until(() => late !== undefined && early !== undefined);
    for (const signal of [late!, early!]) {
      expect(signal.aborted).toBe(true);
      expect((signal.reason as Error).name).toBe('TimeoutError');
    }
    expect(environment.deadlines.size).toBe(0);
  });

  it('an earlier deadline re-arms the timer; one that throws does not stop the others', () => {
    vi.useFakeTimers();
    const d = new Deadlines();
    const fired: string[] = [];
    d.add(Date.now() + 1_000, () => fired.push('late'));
    d.add(Date.now() + 10, () => {
      fired.push('throws');
      throw new Error('boom');
    });
    d.add(Date.now() + 10, () => fired.push('same time'));
    expect(() => vi.advanceTimersByTime(10)).toThrow('boom');
    expect(fired.sort()).toEqual(['same time', 'throws']);
    vi.advanceTimersByTime(990);
    expect(fired).toContain('late');
    expect(d.size).toBe(0);
  });
});

describe('the batch runner', () => {
  const keepers: LeaseKeeper[] = [];
  afterEach(() => {
    for (const k of keepers.splice(0)) k.stop();
  });

  /** A runner of `definition` over a queue of `ready` jobs of the test's own: each claim takes the
   * first ones, as the database would; the settler's statements are recorded. */
  function runner(
    definition: Parameters<typeof defineBatchJob<{ n: number }>>[0],
    ready: ClaimedJob[],
    over: Partial<BatchRunnerDeps> = {},
  ) {
    const kind = defineBatchJob(definition);
    const claims: number[] = [];
    const claimer = {
      send: async (options: { batchSize: number; lockToken: string }) => {
        claims.push(options.batchSize);
        return { jobs: ready.splice(0, options.batchSize).map((j) => ({ ...j, lockedBy: options.lockToken })) };
      },
    } as unknown as Claimer;
    const { statements, sent } = fakeStatements();
    const { settler } = settlerOver(statements);
    const leases = new LeaseKeeper(NO_DB, {
      visibilityTimeoutSeconds: 30,
      onLostUnstarted: () => {},
      renew: async (held) => held.map((h) => ({ id: h.id, cancelRequested: false })),
    });
    keepers.push(leases);
    let changes = 0;
    let stopping = false;
    const registry = new JobRegistry([kind]);
    const r = new BatchRunner(registry.get(kind.kind)!, {
      session: new DrainSession(NO_DB, registry, { workerId: 'unit', visibilityTimeoutSeconds: 30 }),
      claimer,
      settler,
      leases,
      handlerDeadline: () => Date.now() + 60_000,
      mayClaim: () => true,
      stopping: () => stopping,
      tracing: () => null,
      onClaimed: () => {},
      onChange: () => changes++,
      ...over,
    });
    /** Turns until the runner is idle (its cycle and its settlements done). */
    const cycle = async () => {
      r.turn();
      await until(() => !r.busy, Boolean, 5_000);
      await settler.finish();
    };
    return { r, claims, sent, settler, cycle, stop: () => (stopping = true), changes: () => changes };
  }
  const items = (n: number) => Array.from({ length: n }, (_, i) => job({ kind: 'b', payload: { n: i } }));

  it('one call for up to `size` jobs; each item settles on its own, an Error failing that item alone', async () => {
    const calls: number[][] = [];
    const { r, claims, sent, cycle } = runner(
      {
        kind: 'b',
        schema: z.object({ n: z.number() }),
        size: 3,
        handler: (batch) => {
          calls.push(batch.map((i) => i.payload.n));
          return batch.map((i) => (i.payload.n === 1 ? new Error('item 1 failed') : { ok: i.payload.n }));
        },
      },
      items(5),
    );
    await cycle();
    await cycle();
    expect(calls).toEqual([
      [0, 1, 2],
      [3, 4],
    ]);
    expect(claims).toEqual([3, 3]);
    expect(sent.map((x) => x.statement).sort()).toEqual(['complete', 'complete', 'fail']);
    expect(r.book.counts).toMatchObject({ completed: 4, failed: 1 });
    // Nothing more: the next claim finds nothing and the kind is drained until reopened.
    await cycle();
    expect(r.drained).toBe(true);
    r.reopen();
    expect(r.drained).toBe(false);
  });

  it('a throw, or an answer of another length, fails every item of the call saying why', async () => {
    const { r, sent, cycle } = runner(
      { kind: 'b', schema: z.object({ n: z.number() }), size: 2, handler: () => [{ only: 'one' }] },
      items(2),
    );
    await cycle();
    expect(r.book.counts).toMatchObject({ failed: 2, completed: 0 });
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ statement: 'fail' });
  });

  it('a payload its schema refuses is dead at once and is not given to the handler', async () => {
    const seen: unknown[] = [];
    const { r, sent, cycle } = runner(
      {
        kind: 'b',
        schema: z.object({ n: z.number() }),
        size: 2,
        handler: (batch) => {
          seen.push(...batch.map((i) => i.payload));
          return batch.map(() => null);
        },
      },
      [job({ kind: 'b', payload: { n: 7 } }), job({ kind: 'b', payload: { n: 'not a number' } })],
    );
    await cycle();
    expect(seen).toEqual([{ n: 7 }]);
    expect(sent.find((x) => x.statement === 'fail')?.extra).toEqual([
      { permanent: true, retryAfterSeconds: undefined },
    ]);
    expect(r.book.counts).toMatchObject({ completed: 1, dead: 1 });
  });

  it('fewer than `size` ready: it gathers for `waitMs`, claims the rest, then calls once', async () => {
    const calls: number[] = [];
    const ready = items(2);
    const { claims, cycle, r } = runner(
      {
        kind: 'b',
        schema: z.object({ n: z.number() }),
        size: 4,
        waitMs: 150,
        handler: (batch) => {
          calls.push(batch.length);
          return batch.map(() => null);
        },
      },
      ready,
    );
    setTimeout(() => ready.push(...items(2)), 50);
    const started = Date.now();
    await cycle();
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(calls).toEqual([4]);
    expect(claims[0]).toBe(4);
    expect(claims.slice(1).every((n) => n <= 2)).toBe(true);
    expect(r.book.counts.completed).toBe(4);
  });

  it('a drain that stops while a batch gathers releases its jobs, attempts refunded, without calling', async () => {
    let called = false;
    const { r, sent, stop } = runner(
      {
        kind: 'b',
        schema: z.object({ n: z.number() }),
        size: 4,
        waitMs: 5_000,
        handler: (batch) => {
          called = true;
          return batch.map(() => null);
        },
      },
      items(1),
    );
    r.turn();
    await until(() => r.nextLookAt < Number.POSITIVE_INFINITY);
    stop();
    r.stop();
    await until(() => !r.busy, Boolean, 5_000);
    expect(called).toBe(false);
    expect(sent).toEqual([expect.objectContaining({ statement: 'release' })]);
    expect(r.book.counts.released).toBe(1);
  });
});
