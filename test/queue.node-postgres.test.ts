// The queue-behaviour, flow-control, job-lifecycle and workflow suites on node-postgres (the sidecar's driver) against a real PostgreSQL.
import pg from 'pg';
import pino from 'pino';
import { describe, expect, inject, it } from 'vitest';
import { sql } from 'drizzle-orm';
import {
  claim,
  claimLimited,
  commitDurably,
  completeJobs,
  enqueue,
  enqueueMany,
  fail,
  pruneFinished,
  recordStepsCompleted,
} from '../src/queries/index.ts';
import { writeStepRecord } from '../src/workflows/step-records.ts';
import { type Db, rowsOf } from '../src/queries/db.ts';
import { drain } from '../src/drain/index.ts';
import { SETTLE_SPACING_MS } from '../src/drain/settler.ts';
import { JobRegistry } from '../src/jobs/registry.ts';
import { defineJob } from '../src/jobs/index.ts';
import { defineWorkflow } from '../src/workflows/index.ts';
import { sleep } from './support/time.ts';
import { z } from 'zod';
import {
  type StepPark,
  loadSteps,
  parkSteps,
  recordStepCompleted,
  recordStepFailed,
  snoozeRun,
} from '../src/queries/workflows.ts';
import { openPools } from '../src/sidecar/database.ts';
import { Incidents } from '../src/sidecar/incidents.ts';
import { createTestDatabase } from './support/database.ts';
import { startTcpProxy } from './support/tcp-proxy.ts';
import { flowControlSuite } from './conformance/flow-control.ts';
import { jobLifecycleSuite } from './conformance/job-lifecycle.ts';
import { queueBehaviourSuite } from './conformance/queue-behaviour.ts';
import { type Harness, listenOn } from './support/harness.ts';
import { workflowSuite } from './conformance/workflows.ts';
import { kindDoorsSuite } from './conformance/kind-doors.ts';
import { workflowChangeSuite } from './conformance/workflow-changes.ts';

// The sidecar's own pools (src/sidecar/database.ts), as `pgdrain start` opens them.
const nodePostgresHarness = async (): Promise<Harness> => {
  const t = await createTestDatabase();
  const database = openPools(t.url, 10, new Incidents(pino({ level: 'silent' })), { startupOptions: !t.throughPooler });
  return {
    db: database.db,
    query: t.query as Harness['query'],
    connect: async () => t.connect(2).db,
    listen: async (channel) => {
      // Straight to the server: a transaction pooler (PGDRAIN_TEST_POOLER) does not deliver NOTIFY.
      const client = new pg.Client({ connectionString: t.directUrl });
      await client.connect();
      return listenOn(client, channel);
    },
    transactions: database.transactions,
    close: async () => {
      await database.close();
      await t.close();
    },
  };
};

queueBehaviourSuite('node-postgres', nodePostgresHarness, { drainJobs: 5_000, historyRows: 100_000 });
flowControlSuite('node-postgres', nodePostgresHarness);
jobLifecycleSuite('node-postgres', nodePostgresHarness, { fanIn: 10_000 });
workflowSuite('node-postgres', nodePostgresHarness);
workflowChangeSuite('node-postgres', nodePostgresHarness);

// Planner settings belong to the one statement they are for (drizzle/0014): the sidecar's drain
// pool, which every settlement, limited claim, park and housekeeping statement shares, carries none;
// pgdrain.claim() has its own, which reach no statement after it on the same connection.
describe('planner settings (the sidecar drain pool)', () => {
  it("stay inside pgdrain.claim(): the drain pool plans every other statement with the server's own", async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 2, new Incidents(pino({ level: 'silent' })), {
      startupOptions: !t.throughPooler,
    });
    const settings = async () =>
      (
        await rowsOf(
          database.drainDb,
          sql`SELECT current_setting('enable_sort') AS sort, current_setting('enable_seqscan') AS seqscan, current_setting('enable_bitmapscan') AS bitmapscan, current_setting('synchronous_commit') AS commit`,
        )
      )[0];
    try {
      const [server] = await t.query(
        `SELECT current_setting('enable_sort') AS sort, current_setting('enable_seqscan') AS seqscan, current_setting('enable_bitmapscan') AS bitmapscan`,
      );
      expect(await settings()).toEqual({ ...server, commit: 'off' });
      await enqueueMany(
        database.db,
        Array.from({ length: 5 }, (_, i) => ({ kind: 'a', payload: { i } })),
      );
      const claimed = await claim(database.drainDb, { batchSize: 3, lockToken: 'planner-test' });
      expect(claimed.map((j) => j.payload)).toEqual([{ i: 0 }, { i: 1 }, { i: 2 }]);
      // Once the call returns, its settings are gone from the session.
      expect(await settings()).toEqual({ ...server, commit: 'off' });
      const [fn] = await t.query(
        `SELECT l.lanname, p.proconfig FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = 'pgdrain.claim(integer,text[],text,integer)'::regprocedure`,
      );
      // An enqueue made on the drain pool (step.invoke's child) asks for a durable commit in its own
      // transaction only: the session goes back to asynchronous commits after it.
      const inside = await database.drainDb.transaction(async (tx) => {
        await commitDurably(tx);
        return (await rowsOf<{ commit: string }>(tx, sql`SELECT current_setting('synchronous_commit') AS commit`))[0]!
          .commit;
      });
      expect(inside).toBe('on');
      expect(await settings()).toEqual({ ...server, commit: 'off' });
      // PL/pgSQL: its statement's plan is kept for the session, planned under these settings.
      expect(fn).toEqual({
        lanname: 'plpgsql',
        proconfig: expect.arrayContaining([
          'enable_seqscan=off',
          'enable_bitmapscan=off',
          'enable_sort=off',
          'jit=off',
          'plan_cache_mode=force_generic_plan',
        ]),
      });
    } finally {
      await database.close();
      await t.close();
    }
  });

  // drizzle/0025: the plan cache kept planning the claim afresh with each call's values (a LIMIT and
  // a kinds array as parameters never let a generic plan look cheaper): 4% of a drain's PostgreSQL CPU.
  it('pgdrain.claim() is planned once per session, not at every claim', async () => {
    const t = await createTestDatabase();
    const { db } = t.connect(1);
    try {
      await enqueueMany(
        t.db,
        Array.from({ length: 24 }, (_, i) => ({ kind: i % 2 ? 'a' : 'b', payload: { i } })),
      );
      // pg_stat_statements (loaded by every test server): statements inside functions, and planning.
      await t.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await db.execute(sql`SET pg_stat_statements.track = 'all'`);
      await db.execute(sql`SET pg_stat_statements.track_planning = on`);
      let claimed = 0;
      for (let i = 0; i < 12; i++) {
        const kinds = i % 3 === 0 ? undefined : [i % 2 ? 'a' : 'b'];
        claimed += (await claim(db, { batchSize: 2, lockToken: `plans:${i}`, kinds })).length;
      }
      expect(claimed).toBe(24);
      const [counted] = await rowsOf<{ calls: number; plans: number }>(
        db,
        sql`SELECT sum(calls)::int AS calls, sum(plans)::int AS plans FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND NOT toplevel AND query LIKE 'UPDATE pgdrain.jobs j%'`,
      );
      expect(counted).toEqual({ calls: 12, plans: 1 });
    } finally {
      await t.close();
    }
  });
});

// A transactional step whose commit's answer was lost (the connection broke after PostgreSQL had
// committed) hears an error, and its attempt records the step's failure. That must not replace the
// completed record its committed transaction left, or the next attempt runs the step, and its
// writes, again (drizzle/0026; `npm run chaos -- --long` once saw a run's row twice).
describe("a completed step's record", () => {
  it("stays completed when the same attempt then records the step's failure or snoozes for its retry", async () => {
    const t = await createTestDatabase();
    try {
      await t.query('CREATE TABLE public.step_effects (job_id bigint NOT NULL)');
      await enqueueMany(
        t.db,
        Array.from({ length: 2 }, (_, i) => ({ kind: 'stepped', payload: { i } })),
      );
      const [failedAfter, snoozedAfter] = await claim(t.db, { batchSize: 2, lockToken: 'answer-lost' });
      const record = (job: { id: string }) => ({
        jobId: job.id,
        lockedBy: 'answer-lost',
        name: 'write',
        position: 1,
        stepType: 'run' as const,
        startedAt: new Date(),
        priorAttempts: 0,
      });
      for (const job of [failedAfter!, snoozedAfter!]) {
        await t.db.transaction(async (tx) => {
          await tx.execute(sql`INSERT INTO public.step_effects (job_id) VALUES (${job.id}::bigint)`);
          expect(await recordStepCompleted(tx, record(job), '"committed"', { transactional: true })).toBeNull();
        });
      }
      // What the attempt does on hearing the error: the failure recorded, or a snooze for a retry.
      expect(await recordStepFailed(t.db, record(failedAfter!), 'Connection terminated unexpectedly')).toBeUndefined();
      expect(
        await snoozeRun(t.db, record(snoozedAfter!), new Date(Date.now() + 60_000), {
          step: record(snoozedAfter!),
          attempts: 1,
          error: 'Connection terminated unexpectedly',
        }),
      ).toBeNull();
      for (const job of [failedAfter!, snoozedAfter!]) {
        const [stored] = (await loadSteps(t.db, job.id)).filter((s) => s.name === 'write');
        expect([stored?.status, stored?.result, stored?.error]).toEqual(['completed', 'committed', null]);
      }
      // The snooze itself still happened: the run waits for its retry, its attempt refunded.
      const [snoozed] = await t.query<{ status: string; attempts: number }>(
        `SELECT status, attempts FROM pgdrain.jobs WHERE id = $1`,
        [snoozedAfter!.id],
      );
      expect(snoozed).toEqual({ status: 'pending', attempts: 0 });
      // A failure still replaces a failure, and a completion a failure.
      const other = { ...record(failedAfter!), name: 'other' };
      await recordStepFailed(t.db, other, 'first');
      await recordStepFailed(t.db, { ...other, priorAttempts: 1 }, 'second');
      let [stored] = (await loadSteps(t.db, failedAfter!.id)).filter((s) => s.name === 'other');
      expect([stored?.status, stored?.error, stored?.attempts]).toEqual(['failed', 'second', 2]);
      await recordStepCompleted(t.db, { ...other, priorAttempts: 2 }, '3');
      [stored] = (await loadSteps(t.db, failedAfter!.id)).filter((s) => s.name === 'other');
      expect([stored?.status, stored?.result, stored?.error]).toEqual(['completed', 3, null]);
    } finally {
      await t.close();
    }
  });
});

// A step's record must be durable before its run goes on, on a pool that commits asynchronously;
// the records of steps that finish together share a statement (src/workflows/step-records.ts).
describe('step records (the sidecar drain pool)', () => {
  it("commit durably, fenced one by one, several runs' in one statement; a record the server refuses fails its own step only", async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 1, new Incidents(pino({ level: 'silent' })), {
      startupOptions: !t.throughPooler,
    });
    try {
      await enqueueMany(
        t.db,
        Array.from({ length: 3 }, (_, i) => ({ kind: 'recorded', payload: { i } })),
      );
      const [held, other, cancelled] = await claim(database.drainDb, { batchSize: 3, lockToken: 'records' });
      await t.query(`UPDATE pgdrain.jobs SET cancel_requested_at = now() WHERE id = $1`, [cancelled!.id]);
      const step = (job: { id: string }, name: string, lockedBy = 'records') => ({
        jobId: job.id,
        lockedBy,
        name,
        position: 0,
        stepType: 'run' as const,
        startedAt: new Date(),
        priorAttempts: 0,
      });
      const { outcomes, commit } = await database.drainDb.transaction(async (tx) => ({
        outcomes: await recordStepsCompleted(tx, [
          { step: step(held!, 'first'), resultJson: '{"n":1}' },
          { step: step(other!, 'first', 'someone-else'), resultJson: null },
          { step: step(cancelled!, 'first'), resultJson: null },
        ]),
        commit: (await rowsOf<{ commit: string }>(tx, sql`SELECT current_setting('synchronous_commit') AS commit`))[0]!
          .commit,
      }));
      // Written while its attempt holds the job; not for an attempt that lost it, nor once a cancel is asked.
      expect(outcomes).toEqual([null, 'lost', 'cancelled']);
      // The pool commits asynchronously; the records' transaction commits durably.
      expect(commit).toBe('on');
      // The first goes at once; those that come while it is in flight share the next statement
      // (rows written by one statement share its transaction id, xmin).
      // \u0000 is JSON that jsonb refuses; a long result (over 16 KiB) goes alone.
      const results: Record<string, string> = { refused: '"\\u0000"', long: JSON.stringify('x'.repeat(20_000)) };
      const writeAll = (names: string[]) =>
        Promise.allSettled(
          names.map((name) => writeStepRecord(database.drainDb, step(held!, name), results[name] ?? '1')),
        );
      const together = await writeAll(['a', 'b', 'c']);
      expect(together).toEqual(['a', 'b', 'c'].map(() => ({ status: 'fulfilled', value: null })));
      // A result jsonb refuses (\u0000) fails the statement it shares: each of it goes again alone,
      // and only the refused one's step hears an error.
      const refused = await writeAll(['d', 'refused', 'e']);
      expect(refused.map((w) => w.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      const rows = await t.query<{ name: string; result: unknown; xid: string }>(
        `SELECT name, result, xmin::text AS xid FROM pgdrain.workflow_steps WHERE job_id = $1 ORDER BY name`,
        [held!.id],
      );
      expect(rows.map((r) => [r.name, r.result])).toEqual([
        ['a', 1],
        ['b', 1],
        ['c', 1],
        ['d', 1],
        ['e', 1],
        ['first', { n: 1 }],
      ]);
      const xid = Object.fromEntries(rows.map((r) => [r.name, r.xid]));
      expect(new Set([xid.a, xid.b, xid.d, xid.e]).size).toBe(4);
      expect(xid.c).toBe(xid.b);
      // While 'f' is in flight, the long result goes at once on a statement of its own; 'g' and 'h' wait and share one.
      expect(await writeAll(['f', 'long', 'g', 'h'])).toEqual(
        ['f', 'long', 'g', 'h'].map(() => ({ status: 'fulfilled', value: null })),
      );
      const [later] = await t.query<Record<string, string>>(
        `SELECT jsonb_object_agg(name, xmin::text) AS xid FROM pgdrain.workflow_steps
          WHERE job_id = $1 AND name IN ('f', 'long', 'g', 'h')`,
        [held!.id],
      );
      const { f, long, g, h } = later!.xid as unknown as Record<string, string>;
      expect(new Set([f, long, g]).size).toBe(3);
      expect(h).toBe(g);
    } finally {
      await database.close();
      await t.close();
    }
  });
});

// A job's end and a job that begins to wait for it, at once. Whoever makes a job wait for another
// (a workflow's park on a child, an enqueue with `after`) locks that other job's row; a statement
// that ends the job and has to wait for the row goes on, once the waiter commits, with the snapshot
// it began with, which does not show the waiter. These force that order: the ending statement is
// seen waiting for the lock before the waiter commits (drizzle/0023).
describe("jobs that begin to wait while their job's end waits for its row", () => {
  const blockedOnALock = async (query: (sql: string) => Promise<Record<string, unknown>[]>, waiting = 1) => {
    for (let i = 0; i < 500; i++) {
      const [row] = await query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if (Number(row!.n) >= waiting) return;
      await sleep(10);
    }
    throw new Error('the ending statement never waited for the row');
  };

  // A job held by a drainer (token 'upstream') with one dependent already, so that its end takes the
  // statement that releases dependents.
  const heldUpstreamWithADependent = async (db: Db) => {
    const [upstream] = await enqueueMany(db, [{ kind: 'upstream', payload: {} }]);
    const early = await enqueue(db, { kind: 'downstream', payload: { n: 1 }, after: [upstream!.id] });
    const [held] = await claim(db, { batchSize: 1, lockToken: 'upstream', kinds: ['upstream'] });
    return { upstream: upstream!, early, held: held! };
  };

  // A workflow run parked on two children ('one', 'two'), both held by a drainer (token
  // 'children'); the first one's end has woken the run, which is claimed again (`run2`) and about to
  // park on the second once more.
  const childStep = (run: { id: string; lockedBy: string }, childId: string, name: string): StepPark => ({
    jobId: run.id,
    lockedBy: run.lockedBy,
    name,
    position: name === 'one' ? 0 : 1,
    stepType: 'invoke',
    startedAt: new Date(),
    priorAttempts: 0,
    type: 'child',
    childId,
  });
  const runWokenByItsFirstChild = async (db: Db) => {
    const [parent, first, second] = await enqueueMany(db, [
      { kind: 'wf_parent', payload: {} },
      { kind: 'wf_child', payload: { n: 1 } },
      { kind: 'wf_child', payload: { n: 2 } },
    ]);
    const [run1] = await claim(db, { batchSize: 1, lockToken: 'parent-1', kinds: ['wf_parent'] });
    const firstPark = await parkSteps(db, { jobId: run1!.id, lockedBy: run1!.lockedBy }, [
      childStep(run1!, first!.id, 'one'),
      childStep(run1!, second!.id, 'two'),
    ]);
    expect(firstPark.outcome).toBe('recorded');
    const children = await claim(db, { batchSize: 2, lockToken: 'children', kinds: ['wf_child'] });
    expect(children).toHaveLength(2);
    await completeJobs(db, [{ id: first!.id, lockedBy: 'children' }]);
    const [run2] = await claim(db, { batchSize: 1, lockToken: 'parent-2', kinds: ['wf_parent'] });
    expect(run2?.id).toBe(parent!.id);
    return { parent: parent!, second: second!, run2: run2! };
  };

  it('a workflow parked again on its child is woken by the child that ended meanwhile', async () => {
    const t = await createTestDatabase();
    const ending = t.connect(2).db;
    const parking = t.connect(1).db;
    try {
      // The run parks again on the second child, which ends while that park holds its row.
      const { parent, second, run2 } = await runWokenByItsFirstChild(t.db);
      let ended: Promise<unknown> | undefined;
      await parking.transaction(async (tx) => {
        const again = await parkSteps(tx, { jobId: run2.id, lockedBy: run2.lockedBy }, [
          childStep(run2, second.id, 'two'),
        ]);
        expect(again.outcome).toBe('recorded');
        ended = completeJobs(ending, [{ id: second.id, lockedBy: 'children' }]);
        await blockedOnALock(t.query);
      });
      await ended;
      const [row] = await t.query(`SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1`, [parent.id]);
      expect(row).toEqual({ status: 'pending', locked_by: null });
    } finally {
      await t.close();
    }
  });

  it('a workflow run held by another transaction when its child ends is released by the next housekeeping round', async () => {
    const t = await createTestDatabase();
    const ending = t.connect(2).db;
    const parking = t.connect(1).db;
    const holding = t.connect(1).db;
    try {
      // As in the case above: the run parks again on the second child while the second ends.
      const { parent, second, run2 } = await runWokenByItsFirstChild(t.db);
      let ended: Promise<unknown> | undefined;
      let held: Promise<unknown> | undefined;
      let releaseHolder = () => {};
      await parking.transaction(async (tx) => {
        const again = await parkSteps(tx, { jobId: run2.id, lockedBy: run2.lockedBy }, [
          childStep(run2, second.id, 'two'),
        ]);
        expect(again.outcome).toBe('recorded');
        ended = completeJobs(ending, [{ id: second.id, lockedBy: 'children' }]);
        await blockedOnALock(t.query);
        // Meanwhile a user's transaction enqueues a job `after` the run: it waits for the run's
        // row, takes it as the park commits, and holds it while the ending statement looks again.
        held = holding.transaction(async (userTx) => {
          const job = await enqueue(userTx, { kind: 'downstream', payload: {}, after: [parent.id] });
          expect(job.status).toBe('waiting');
          await Promise.race([new Promise<void>((resolve) => (releaseHolder = resolve)), sleep(5_000)]);
        });
        await blockedOnALock(t.query, 2);
      });
      await ended;
      releaseHolder();
      await held;
      // Whichever took the run's row first, after the next round the run is pending, nothing noted.
      await pruneFinished(t.db);
      const [row] = await t.query(`SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1`, [parent.id]);
      expect(row).toEqual({ status: 'pending', locked_by: null });
      expect(await t.query(`SELECT run_id::text FROM pgdrain.runs_to_recheck`)).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('a job enqueued `after` one that completed meanwhile is released', async () => {
    const t = await createTestDatabase();
    const ending = t.connect(2).db;
    const enqueuing = t.connect(1).db;
    try {
      const { upstream, early, held } = await heldUpstreamWithADependent(t.db);
      let ended: Promise<unknown> | undefined;
      const late = await enqueuing.transaction(async (tx) => {
        const job = await enqueue(tx, { kind: 'downstream', payload: { n: 2 }, after: [upstream.id] });
        expect(job.status).toBe('waiting');
        ended = completeJobs(ending, [{ id: held.id, lockedBy: 'upstream' }]);
        await blockedOnALock(t.query);
        return job;
      });
      await ended;
      const rows = await t.query(
        `SELECT id::text AS id, status, waiting_for FROM pgdrain.jobs WHERE kind = 'downstream' ORDER BY id`,
      );
      expect(rows).toEqual([
        { id: early.id, status: 'pending', waiting_for: 0 },
        { id: late.id, status: 'pending', waiting_for: 0 },
      ]);
    } finally {
      await t.close();
    }
  });

  it('a job enqueued `after` one that died meanwhile dies, and so does the one waiting for it, each with its letter', async () => {
    const t = await createTestDatabase();
    const ending = t.connect(2).db;
    const enqueuing = t.connect(1).db;
    try {
      await t.query(`INSERT INTO pgdrain.dead_letter_routes (kind, dead_letter) VALUES ('downstream', 'letters')`);
      const { upstream, early, held } = await heldUpstreamWithADependent(t.db);
      let ended: Promise<unknown> | undefined;
      const [late, later] = await enqueuing.transaction(async (tx) => {
        const job = await enqueue(tx, { kind: 'downstream', payload: { n: 2 }, after: [upstream.id] });
        const next = await enqueue(tx, { kind: 'downstream', payload: { n: 3 }, after: [job.id] });
        ended = fail(ending, { id: held.id, lockedBy: 'upstream' }, { error: 'no', permanent: true });
        await blockedOnALock(t.query);
        return [job, next];
      });
      expect(await ended).toMatchObject({ outcome: 'dead' });
      const rows = await t.query(
        `SELECT id::text AS id, status, last_error, dead_letter_id IS NOT NULL AS lettered FROM pgdrain.jobs
          WHERE kind = 'downstream' ORDER BY id`,
      );
      const why = `job ${upstream.id} it waits for ended dead`;
      expect(rows).toEqual(
        [early, late, later].map(({ id }) => ({ id, status: 'dead', last_error: why, lettered: true })),
      );
      const [letters] = await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'letters'`);
      expect(letters).toEqual({ n: 3 });
    } finally {
      await t.close();
    }
  });
});

// Statements that took longer to parse and plan than to run, sent again and again with the same
// text: a limited claim (a CTE per limit), a workflow run's read of its steps. Each connection
// prepares them once, by a name that their text decides.
/** PGDRAIN_TEST_POOLER: the suites run through a transaction pooler, where statements go unnamed and
 * a server session is not the client's (the two describes below are about a session of one's own). */
const THROUGH_POOLER = inject('poolerPort') !== null;

describe.skipIf(THROUGH_POOLER)('prepared statements (the sidecar drain pool)', () => {
  it("a workflow run's read of its steps is one prepared statement, run again by every read", async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 1, new Incidents(pino({ level: 'silent' })), {
      startupOptions: !t.throughPooler,
    });
    try {
      for (const id of ['1', '2', '3']) expect(await loadSteps(database.drainDb, id)).toEqual([]);
      const prepared = await rowsOf<{ name: string; runs: number }>(
        database.drainDb,
        sql`SELECT name, (generic_plans + custom_plans)::int AS runs FROM pg_prepared_statements
             WHERE name LIKE 'pgdrain_load_steps_%'`,
      );
      expect(prepared).toEqual([{ name: expect.stringMatching(/^pgdrain_load_steps_[0-9a-f]{16}$/), runs: 3 }]);
    } finally {
      await database.close();
      await t.close();
    }
  });

  it("a claim's workflow runs read their steps in one statement, and runs woken from a sleep pass it with none", async () => {
    const t = await createTestDatabase();
    // One connection: its prepared statements count every statement of the kind the drains send.
    const { db } = t.connect(1);
    const flow = defineWorkflow({
      kind: 'wf_read_ahead',
      schema: z.object({ i: z.number() }),
      keepCompletedSeconds: 60,
      run: async ({ i }, step) => {
        const a = await step.run('a', () => i);
        await step.sleep('nap', 0.3);
        return step.run('b', () => a + 1);
      },
    });
    const registry = new JobRegistry([flow]);
    const runs = (kind: string) =>
      rowsOf<{ runs: number }>(
        db,
        sql`SELECT coalesce(sum(generic_plans + custom_plans), 0)::int AS runs FROM pg_prepared_statements
             WHERE name LIKE ${`pgdrain_${kind}_%`}`,
      ).then((rows) => rows[0]!.runs);
    const drainAll = () => drain(db, registry, { workerId: 'read-ahead', batchSize: 20, concurrency: 20 });
    try {
      await enqueueMany(
        t.db,
        Array.from({ length: 20 }, (_, i) => ({ kind: flow.kind, payload: { i } })),
      );
      expect(await drainAll()).toMatchObject({ snoozed: 20 });
      const readsBefore = await runs('load_attempt_steps');
      // One read for the claim's 20 runs, not one each (a second claim may come back empty).
      expect(readsBefore).toBeGreaterThanOrEqual(1);
      expect(readsBefore).toBeLessThanOrEqual(2);
      expect(await runs('park_sleep')).toBe(20);
      await sleep(350);
      expect(await drainAll()).toMatchObject({ completed: 20 });
      expect((await runs('load_attempt_steps')) - readsBefore).toBeLessThanOrEqual(2);
      // The sleeps had ended: the read completed them, and no run sent a park of its own.
      expect(await runs('park_sleep')).toBe(20);
      // 40 records (a and b of 20 runs), durable, in a few shared statements: a step that finishes
      // while one is in flight goes in the next.
      expect(await runs('record_steps')).toBeGreaterThanOrEqual(2);
      expect(await runs('record_steps')).toBeLessThanOrEqual(20);
      const steps = await t.query(
        `SELECT name, status, count(*)::int AS n FROM pgdrain.workflow_steps GROUP BY 1, 2 ORDER BY 1`,
      );
      expect(steps).toEqual(['a', 'b', 'nap'].map((name) => ({ name, status: 'completed', n: 20 })));
      const results = await t.query(
        `SELECT (result)::int AS result FROM pgdrain.jobs_and_history WHERE kind = 'wf_read_ahead' ORDER BY 1`,
      );
      expect(results.map((r) => r.result)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    } finally {
      await t.close();
    }
  });

  it('a limited claim is one prepared statement per connection and shape of limits, run again by every claim', async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 1, new Incidents(pino({ level: 'silent' })), {
      startupOptions: !t.throughPooler,
    });
    try {
      await enqueueMany(
        database.db,
        Array.from({ length: 40 }, (_, i) => ({ kind: 'fair-tenants', payload: { i }, groupKey: `tenant-${i % 4}` })),
      );
      const fair = { kind: 'fair-tenants', limits: { fair: true }, batchSize: 4 };
      const claimed: string[] = [];
      for (let i = 0; i < 3; i++)
        claimed.push(
          ...(await claimLimited(database.drainDb, { ...fair, lockToken: `prepared:${i}` })).jobs.map((j) => j.id),
        );
      // Another shape of limits is another statement beside it.
      await claimLimited(database.drainDb, {
        kind: 'fair-tenants',
        limits: { groupConcurrency: 1 },
        batchSize: 4,
        lockToken: 'prepared:group',
      });
      expect(new Set(claimed).size).toBe(12);
      const prepared = await rowsOf<{ name: string; runs: number }>(
        database.drainDb,
        sql`SELECT name, (generic_plans + custom_plans)::int AS runs FROM pg_prepared_statements
             WHERE name LIKE 'pgdrain_claim_limited_%' ORDER BY runs DESC`,
      );
      expect(prepared.map((p) => p.runs)).toEqual([3, 1]);
      expect(prepared[0]!.name).toMatch(/^pgdrain_claim_limited_[0-9a-f]{16}$/);
    } finally {
      await database.close();
      await t.close();
    }
  });
});

// A transactional handler's connection is checked out of its pool, where nothing listens for its
// errors: one whose backend ends between two of the handler's queries (a server restart, a network
// cut) once ended the sidecar with an unhandled 'error' event (the chaos suite's SIGTERM with a
// workflow's transactional step in flight).
describe.skipIf(THROUGH_POOLER)("checked-out connections (the sidecar's pools)", () => {
  it('one whose backend is terminated while checked out (or in a Drizzle transaction) errs its next query, goes back destroyed, and the process lives on', async () => {
    const t = await createTestDatabase();
    const database = openPools(t.url, 2, new Incidents(pino({ level: 'silent' })), {
      startupOptions: !t.throughPooler,
    });
    try {
      const connection = await database.transactions();
      const [{ pid }] = (await rowsOf<{ pid: number }>(connection.db, sql`SELECT pg_backend_pid() AS pid`)) as [
        { pid: number },
      ];
      await t.query('SELECT pg_terminate_backend($1)', [pid]);
      // The client hears its socket close while no query is on it (the unhandled 'error' was here).
      await new Promise((r) => setTimeout(r, 200));
      await expect(rowsOf(connection.db, sql`SELECT 1`)).rejects.toThrow();
      connection.giveBack(false);
      const next = await database.transactions();
      const [row] = await rowsOf<{ pid: number }>(next.db, sql`SELECT pg_backend_pid() AS pid`);
      expect(row!.pid).not.toBe(pid);
      next.giveBack(false);
      // A Drizzle transaction on a pool holds its client the same way (step.invoke's, a limited claim's).
      const inTransaction = database.drainDb.transaction(async (tx) => {
        const [own] = await rowsOf<{ pid: number }>(tx, sql`SELECT pg_backend_pid() AS pid`);
        await t.query('SELECT pg_terminate_backend($1)', [own!.pid]);
        await new Promise((r) => setTimeout(r, 200));
        await rowsOf(tx, sql`SELECT 1`);
      });
      await expect(inTransaction).rejects.toThrow();
      expect(await rowsOf(database.drainDb, sql`SELECT 1 AS one`)).toEqual([{ one: 1 }]);
    } finally {
      await database.close();
      await t.close();
    }
  });

  it('a transactional handler idle longer than idle_in_transaction_session_timeout ends dead with a last_error naming it', async () => {
    const t = await createTestDatabase();
    // A DBA's setting, for every new session of this database: the handler pauses 1.2 s between two statements.
    await t.query(
      `ALTER DATABASE "${new URL(t.url).pathname.slice(1)}" SET idle_in_transaction_session_timeout = '300ms'`,
    );
    const database = openPools(t.url, 2, new Incidents(pino({ level: 'silent' })));
    try {
      const slow = defineJob({
        kind: 'slow_tx',
        schema: z.object({}),
        transactional: true,
        maxAttempts: 1,
        handler: async (_payload, ctx) => {
          await ctx.tx.execute(sql`SELECT 1`);
          await sleep(1_200);
          await ctx.tx.execute(sql`SELECT 2`);
        },
      });
      await t.query(`SELECT pgdrain.enqueue('slow_tx', '{}', max_attempts => 1)`);
      await drain(database.drainDb, new JobRegistry([slow]), {
        workerId: 'idle-test',
        transactions: database.transactions,
      });
      const [job] = await t.query<{ status: string; last_error: string }>(
        'SELECT status, last_error, attempts, lost_attempts FROM pgdrain.jobs',
      );
      expect(job).toMatchObject({ status: 'dead', attempts: 1 });
      expect(job!.last_error).toMatch(/idle_in_transaction_session_timeout/);
      expect(job!.last_error).toMatch(/SQLSTATE 25P03/);
      expect(job!.last_error).not.toMatch(/Failed query/);
    } finally {
      await database.close();
      await t.close();
    }
  });

  it("default_transaction_isolation = 'serializable' on the database: enqueues, drains and settles every job once", async () => {
    const t = await createTestDatabase();
    await t.query(
      `ALTER DATABASE "${new URL(t.url).pathname.slice(1)}" SET default_transaction_isolation = 'serializable'`,
    );
    const database = openPools(t.url, 4, new Incidents(pino({ level: 'silent' })));
    try {
      const ran = new Map<string, number>();
      const counted = defineJob({
        kind: 'counted',
        schema: z.object({ n: z.number() }),
        handler: async (_payload, { job }) => {
          ran.set(job.id, (ran.get(job.id) ?? 0) + 1);
        },
      });
      await enqueueMany(
        database.db,
        Array.from({ length: 200 }, (_, n) => ({ kind: 'counted', payload: { n } })),
      );
      const [{ isolation }] = (await rowsOf<{ isolation: string }>(
        database.db,
        sql`SELECT current_setting('transaction_isolation') AS isolation`,
      )) as [{ isolation: string }];
      expect(isolation).toBe('serializable');
      for (let round = 0; round < 5 && ran.size < 200; round++)
        await drain(database.drainDb, new JobRegistry([counted]), {
          workerId: `serializable-${round}`,
          concurrency: 20,
        });
      expect(ran.size).toBe(200);
      expect([...ran.values()].every((n) => n === 1)).toBe(true);
      expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
    } finally {
      await database.close();
      await t.close();
    }
  });

  it('a Drizzle transaction whose begin fails on a dropped connection gives its client back: the pools still close', async () => {
    const t = await createTestDatabase();
    const proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(t.url).port) });
    const database = openPools(proxy.urlFor(t.url), 1, new Incidents(pino({ level: 'silent' })));
    try {
      for (let round = 0; round < 5; round++) {
        await rowsOf(database.drainDb, sql`SELECT 1`); // an idle client in the pool
        proxy.dropConnections();
        // Checked out before it notices its connection is gone: `begin` fails, outside Drizzle's finally.
        await expect(database.drainDb.transaction(async (tx) => rowsOf(tx, sql`SELECT 1`))).rejects.toThrow();
      }
      // Every checkout went back: close() ends (pg-pool's end() waits for every checked-out client).
      const closed = await Promise.race([
        database.close().then(() => 'closed'),
        new Promise((r) => setTimeout(() => r('hung'), 5_000)),
      ]);
      expect(closed).toBe('closed');
    } finally {
      await proxy.close();
      await t.close();
    }
  });
});
kindDoorsSuite('node-postgres', nodePostgresHarness);

// src/drain/settler.ts: while other handlers run, settlements wait for company (SETTLE_SPACING_MS).
describe('settlements of jobs that end a few at a time', () => {
  it('share statements: the completing statements start at most once per spacing while handlers run, and each job completes once', async () => {
    const t = await createTestDatabase();
    const { db, pool } = t.connect(4);
    // Every statement the drain sends goes through this pool: count the completing ones.
    let completing = 0;
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text;
      if (text && /deleted AS\s*\(DELETE FROM "pgdrain"\."jobs"/.test(text)) completing++;
      return query(...args);
    };
    try {
      const jobs = 400;
      const ran: number[] = [];
      const registry = new JobRegistry([
        defineJob({
          kind: 'ms',
          schema: z.object({ i: z.number() }),
          handler: async ({ i }) => {
            await sleep(2);
            ran.push(i);
          },
        }),
      ]);
      await enqueueMany(
        t.db,
        Array.from({ length: jobs }, (_, i) => ({ kind: 'ms', payload: { i } })),
      );
      const started = performance.now();
      const report = await drain(db, registry, { workerId: 'spacing', concurrency: 8, batchSize: 50 });
      const elapsed = performance.now() - started;
      expect(report.completed).toBe(jobs);
      expect(new Set(ran).size).toBe(jobs);
      expect(ran).toHaveLength(jobs);
      expect((await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n).toBe(0);
      // One statement per spacing at most, the first at once and the last at the drain's end;
      // settled as soon as each returned, 400 jobs of 2 ms at 8 slots took about one per 4 jobs.
      expect(completing).toBeGreaterThan(0);
      expect(completing).toBeLessThanOrEqual(Math.floor(elapsed / SETTLE_SPACING_MS) + 2);
    } finally {
      await t.close();
    }
  });
});
