// Limits that hold across every drainer, tried the way they are deployed: two `pgdrain start`
// processes and the Worker under `wrangler dev` (cron invocations back to back, and run-now jobs
// posted to its API) drain one database. Two records prove what ran at once:
//   - the rows: a trigger on pgdrain.jobs logs every change of a job (its lock token, clock time),
//     so each claim's hold of a job — from the claim to its settlement, under one lock token — is
//     known exactly, whichever drainer made it;
//   - the handlers: each reports its start and end to a recorder here. A run the drain gave up
//     (its timeout, a Worker's budget) may report its end after its job was settled; such runs are
//     counted by the rows, not by their reports.
// The recorder can hold its answer to a start, so the test decides which drainer holds which
// slot when it matters: nothing here depends on which process wins a race.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueueMany } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type FixtureWorker, startFixtureWorkerOnNeon } from './support/fixture-worker.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/limits/sidecar.ts', import.meta.url));
const WORKER_CONFIG = fileURLToPath(new URL('./fixtures/limits/wrangler.toml', import.meta.url));
const TOKEN = 'limits-test-token-0123456789';

interface RunEvent {
  kind: string;
  n: number;
  key: string | null;
  id: string;
  phase: 'start' | 'end' | 'call' | 'revoked';
  by: string;
  token: string;
  givenUp?: boolean;
  at: number;
}

/** One claim's hold of a job, from the rows: claimed under `token` until settled or reaped. */
interface Hold {
  id: string;
  key: string | null;
  token: string;
  from: number;
  to: number;
}

let t: TestDatabase;
let dir: string;
let worker: FixtureWorker;
let recorderUrl: string;
let recorder: http.Server;
const events: RunEvent[] = [];
const sidecars: SidecarProcess[] = [];

/** While holding, the recorder keeps its answers to starts until released: those runs wait. */
const gate = {
  holding: false,
  held: [] as (() => void)[],
  hold() {
    this.holding = true;
  },
  /** Lets the held runs go on; runs that start from now on are held too. */
  releaseHeld() {
    for (const answer of this.held.splice(0)) answer();
  },
  open() {
    this.holding = false;
    this.releaseHeld();
  },
};

beforeAll(async () => {
  t = await createTestDatabase();
  await t.query(
    `CREATE TABLE public.job_log (at timestamptz NOT NULL DEFAULT clock_timestamp(), id bigint, kind text, group_key text, status text, locked_by text)`,
  );
  await t.query(`CREATE FUNCTION public.log_job() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO public.job_log (id, kind, group_key, status, locked_by) VALUES (OLD.id, OLD.kind, OLD.group_key, 'deleted', NULL);
        RETURN OLD;
      END IF;
      INSERT INTO public.job_log (id, kind, group_key, status, locked_by) VALUES (NEW.id, NEW.kind, NEW.group_key, NEW.status, NEW.locked_by);
      RETURN NEW;
    END $$`);
  await t.query(
    `CREATE TRIGGER log_job AFTER INSERT OR UPDATE OR DELETE ON pgdrain.jobs FOR EACH ROW EXECUTE FUNCTION public.log_job()`,
  );
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-limits-'));
  await chmod(dir, 0o755);
  recorder = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const event = { ...(JSON.parse(body) as Omit<RunEvent, 'at'>), at: performance.now() };
      events.push(event);
      if (event.phase === 'start' && gate.holding) gate.held.push(() => res.end('ok'));
      else res.end('ok');
    });
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  recorderUrl = `http://127.0.0.1:${(recorder.address() as { port: number }).port}/run`;
  worker = await startFixtureWorkerOnNeon({
    config: WORKER_CONFIG,
    databaseUrl: t.url,
    dir,
    env: {
      API_TOKEN: TOKEN,
      DRAIN_BUDGET_MS: '2500',
      VISIBILITY_TIMEOUT_SECONDS: '3',
    },
  });
}, 60_000);
afterAll(async () => {
  gate.open();
  await worker?.stop();
  await new Promise((r) => recorder?.close(r));
  await t?.close();
  await rm(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  events.length = 0;
  await resetQueue(t, ['public.job_log']);
});
afterEach(async () => {
  gate.open();
  for (const s of sidecars.splice(0)) {
    s.kill();
    await s.exited;
  }
});

const startSidecars = async (n: number, env: Record<string, string> = {}) => {
  for (let i = 0; i < n; i++) {
    sidecars.push(
      await startSidecarProcess(
        {
          DATABASE_URL: t.url,
          API_TOKEN: TOKEN,
          POLL_INTERVAL_MS: '200',
          VISIBILITY_TIMEOUT_SECONDS: '3',
          REAP_INTERVAL_MS: '500',
          ...env,
        },
        SIDECAR,
      ),
    );
  }
};

/** Cron invocations of the Worker back to back until `done`. */
async function cronUntil(done: () => boolean, timeoutMs: number): Promise<number> {
  let invocations = 0;
  for (const deadline = Date.now() + timeoutMs; !done() && Date.now() < deadline; invocations++)
    await worker.scheduled();
  return invocations;
}

/** The most of `intervals` open at once (an interval ending when another starts does not overlap it). */
function mostAtOnce(intervals: readonly { from: number; to: number }[]): number {
  const marks = intervals.flatMap((i) => [
    { at: i.from, delta: 1 },
    { at: i.to, delta: -1 },
  ]);
  marks.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let now = 0;
  let most = 0;
  for (const m of marks) most = Math.max(most, (now += m.delta));
  return most;
}

/** Every claim's hold of a job of `kind`, from the rows. A hold not settled yet ends at `openUntil`. */
async function holds(kind: string, openUntil = Infinity): Promise<Hold[]> {
  const log = await t.query<{
    at_ms: number;
    id: string;
    group_key: string | null;
    status: string;
    locked_by: string | null;
  }>(
    `SELECT extract(epoch FROM at) * 1000 AS at_ms, id::text, group_key, status, locked_by FROM public.job_log WHERE kind = $1 ORDER BY at, id`,
    [kind],
  );
  const open = new Map<string, Hold>();
  const out: Hold[] = [];
  for (const row of log) {
    const at = Number(row.at_ms);
    const current = open.get(row.id);
    if (current && !(row.status === 'running' && row.locked_by === current.token)) {
      out.push({ ...current, to: at });
      open.delete(row.id);
    }
    if (row.status === 'running' && row.locked_by && !open.has(row.id))
      open.set(row.id, { id: row.id, key: row.group_key, token: row.locked_by, from: at, to: Infinity });
  }
  return [...out, ...[...open.values()].map((h) => ({ ...h, to: openUntil }))];
}

/** Each handler run of `kind` its report tells of, with the run's end; a run whose end was never
 * reported (its process was killed) ends at `cutAt`. */
function reportedRuns(
  kind: string,
  cutAt = Infinity,
): { token: string; n: number; key: string | null; from: number; to: number; givenUp: boolean }[] {
  const ends = new Map(events.filter((e) => e.kind === kind && e.phase === 'end').map((e) => [e.token, e]));
  const revoked = new Set(events.filter((e) => e.kind === kind && e.phase === 'revoked').map((e) => e.token));
  return events
    .filter((e) => e.kind === kind && e.phase === 'start')
    .map((s) => {
      const end = ends.get(s.token);
      return {
        token: s.token,
        n: s.n,
        key: s.key,
        from: s.at,
        to: end?.at ?? cutAt,
        givenUp: end?.givenUp === true || revoked.has(s.token),
      };
    });
}

/** The handlers' reports reach the recorder on connections of their own and are stamped there, in
 * a test process busy with the whole suite: under that load a run's end report can be stamped after
 * the next run's start (CI at 05da444: two ends late at once, 5 runs of a limit of 3 by the reports
 * while the rows held 3), though the rows never held both. The rows are the guarantee; the reports
 * check that no handler ran beside more than the limit, so a run's end is taken this much earlier —
 * less than the tests' 150 and 300 ms runs, which a real extra run would overlap for. */
const REPORT_SLACK_MS = 100;

/** The most handler runs of `kind` at once, among runs that were not given up (a given-up run's
 * hold ended when its job was settled, which may be before its report arrives). */
const handlersAtOnce = (kind: string, cutAt = Infinity) =>
  mostAtOnce(
    reportedRuns(kind, cutAt)
      .filter((r) => !r.givenUp)
      .map((r) => ({ ...r, to: Math.max(r.from, r.to - REPORT_SLACK_MS) })),
  );

const ended = (kind: string) =>
  new Set(
    events
      .filter((e) => e.kind === kind && e.phase === 'end' && !e.givenUp)
      .filter((e) => !events.some((r) => r.phase === 'revoked' && r.token === e.token))
      .map((e) => e.n),
  );
const startsBy = (by: string) => events.filter((e) => e.phase === 'start' && e.by === by);

/** Every drainer's first handler run loads its HTTP client (a tenth of a second): done before timing starts. */
async function warmUp(): Promise<void> {
  await enqueueMany(
    t.db,
    Array.from({ length: 12 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 0, n: 1000 + n } })),
  );
  await cronUntil(() => ended('limited').size === 12, 20_000);
  await until(
    async () => ended('limited').size,
    (n) => n === 12,
    10_000,
    'the warm-up runs',
  );
  events.length = 0;
}

const postRunNow = (n: number) =>
  fetch(`${worker.url}/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'limited', payload: { recorder: recorderUrl, ms: 300, n }, runNow: true }),
  }).then((r) => r.status);

const jobsLeft = async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n as number;
/** `until`, and when it times out, the jobs left and their last errors in the failure (what a run
 * under load left behind says why, where a count alone does not). */
async function untilOrSayWhy<T>(probe: () => Promise<T>, ok: (value: T) => boolean, ms: number, what: string) {
  try {
    return await until(probe, ok, ms, what);
  } catch (error) {
    const left = await t.query(
      `SELECT id, kind, status, attempts, lost_attempts, payload->>'n' AS n, last_error FROM pgdrain.jobs ORDER BY id`,
    );
    throw new Error(`${(error as Error).message}; jobs left: ${JSON.stringify(left)}`);
  }
}

describe('limits across two sidecar processes and the Worker', () => {
  it('globalConcurrency 3: never more than 3 held across sidecars, cron invocations and run-now, and each of them holds slots', async () => {
    // Each sidecar runs one job at a time, so the third slot is only ever the Worker's. Nothing here
    // waits for a lease to end: a longer one than the file's 3 s keeps a loaded machine's late
    // renewals from losing runs the count waits for.
    await startSidecars(2, { CONCURRENCY: '1', VISIBILITY_TIMEOUT_SECONDS: '10' });
    gate.hold();
    await enqueueMany(
      t.db,
      Array.from({ length: 20 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 300, n } })),
    );
    await until(
      async () => startsBy('sidecar').length,
      (n) => n === 2,
      10_000,
      'both sidecars to hold a slot',
    );
    // The third slot, taken by a run-now job while both sidecars hold theirs.
    expect(await postRunNow(20)).toBe(201);
    await until(
      async () => startsBy('run-now').length,
      (n) => n === 1,
      10_000,
      'the run-now job to hold the third slot',
    );
    // The limit is full: cron invocations claim nothing now. Let the three go on; when the run-now
    // job ends, its slot can only be taken by a cron invocation (each sidecar holds its one).
    const crons = cronUntil(() => ended('limited').size === 21, 60_000);
    await new Promise((r) => setTimeout(r, 300));
    expect(startsBy('worker')).toHaveLength(0);
    gate.releaseHeld();
    await until(
      async () => startsBy('worker').length,
      (n) => n >= 1,
      20_000,
      'a cron invocation to take the freed slot',
    );
    gate.open();
    await crons;
    await untilOrSayWhy(
      async () => ended('limited').size,
      (n) => n === 21,
      20_000,
      'every limited job to run',
    );
    await until(jobsLeft, (n) => n === 0, 5_000, 'the last completions');
    const held = await holds('limited');
    expect(mostAtOnce(held)).toBe(3);
    expect(handlersAtOnce('limited')).toBeLessThanOrEqual(3);
    // Every run the handlers reported ran under a claim the rows show.
    const tokens = new Set(held.map((h) => h.token));
    expect(events.filter((e) => e.phase === 'start' && !tokens.has(e.token))).toEqual([]);
  }, 90_000);

  it('groupConcurrency 1: per key one at a time and in enqueue order, keys side by side', async () => {
    await startSidecars(2);
    await enqueueMany(
      t.db,
      Array.from({ length: 30 }, (_, n) => ({
        kind: 'grouped',
        payload: { recorder: recorderUrl, ms: 150, n },
        groupKey: `customer-${n % 6}`,
      })),
    );
    await cronUntil(() => ended('grouped').size === 30, 60_000);
    await until(
      async () => ended('grouped').size,
      (n) => n === 30,
      20_000,
      'every grouped job to run',
    );
    await until(jobsLeft, (n) => n === 0, 5_000, 'the last completions');
    const held = await holds('grouped');
    const runs = reportedRuns('grouped');
    for (let key = 0; key < 6; key++) {
      // Never two holds of a key at once, by the rows.
      expect(mostAtOnce(held.filter((h) => h.key === `customer-${key}`))).toBe(1);
      // The runs that completed, in the order they were enqueued (a run given up is retried first).
      // (A run whose end never reached the recorder — its report failed under load, and the job ran
      // again — did not complete: it is not one of them.)
      const completed = runs
        .filter((r) => r.key === `customer-${key}` && !r.givenUp && Number.isFinite(r.to))
        .sort((a, b) => a.from - b.from);
      const told = JSON.stringify(runs.filter((r) => r.key === `customer-${key}`));
      // The rows above are the guarantee; a run's end is taken a report's delivery earlier, as in
      // handlersAtOnce (end reports were stamped 3 ms after the next run's start in CI at 4cbb8ab,
      // 37 ms at c6f8577 with three test files at once; the rows held both times).
      expect(mostAtOnce(completed.map((r) => ({ ...r, to: r.to - REPORT_SLACK_MS }))), told).toBe(1);
      expect(
        completed.map((r) => r.n),
        told,
      ).toEqual([0, 1, 2, 3, 4].map((i) => i * 6 + key));
    }
    expect(mostAtOnce(held)).toBeGreaterThan(1);
  }, 90_000);

  it('rateLimit 5 a second: no window holds more starts, and the backlog drains at that pace, not slower', async () => {
    await startSidecars(2);
    await warmUp();
    await enqueueMany(
      t.db,
      Array.from({ length: 25 }, (_, n) => ({ kind: 'rated', payload: { recorder: recorderUrl, ms: 0, n } })),
    );
    await cronUntil(() => ended('rated').size === 25, 60_000);
    await until(
      async () => ended('rated').size,
      (n) => n === 25,
      20_000,
      'every rated job to run',
    );
    await until(jobsLeft, (n) => n === 0, 5_000, 'the last completions');
    // The starts as the database counts them: each claim's hold, from the rows (the trigger stamps
    // it inside the claim's statement). The handlers' own reports travel to the recorder on
    // connections of their own, and under load a window's reports can arrive bunched with the
    // next window's (CI saw 9 in 0.9 s), so they are not the measure of the limit.
    const starts = (await holds('rated')).map((h) => h.from).sort((a, b) => a - b);
    expect(starts).toHaveLength(25);
    // The limit counts a start at its claim's now(); the row's stamp is a few ms later (50 ms slack).
    for (const s of starts) expect(starts.filter((x) => x >= s && x < s + 950).length).toBeLessThanOrEqual(5);
    // Every job's handler ran (the reports), once per claim.
    expect(events.filter((e) => e.kind === 'rated' && e.phase === 'start')).toHaveLength(25);
    // 25 starts at 5 a second: the last one four windows after the first.
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(3_500);
    expect(starts.at(-1)! - starts[0]!).toBeLessThan(6_000);
  }, 90_000);

  it('kill -9 of a sidecar holding slots: they come back when its leases end, nothing is lost, the limit still holds', async () => {
    await startSidecars(2);
    gate.hold();
    await enqueueMany(
      t.db,
      Array.from({ length: 6 }, (_, n) => ({ kind: 'limited', payload: { recorder: recorderUrl, ms: 300, n } })),
    );
    await until(
      async () => events.filter((e) => e.phase === 'start').length,
      (n) => n === 3,
      10_000,
      'three slots taken',
    );
    // The process holding most of them, by the pid in its lock token (sidecar-<drainer id>.<host>.<pid>.<hex>:<n>).
    const pids = events
      .filter((e) => e.phase === 'start')
      .map((e) => Number(/^sidecar-[^.]+\..+\.(\d+)\.[0-9a-f]+:\d+$/.exec(e.token)?.[1]));
    const victimPid = [...new Set(pids)].sort(
      (a, b) => pids.filter((p) => p === b).length - pids.filter((p) => p === a).length,
    )[0];
    const victim = sidecars.find((s) => s.child.pid === victimPid)!;
    victim.child.kill('SIGKILL');
    await victim.exited;
    const cutAt = performance.now();
    gate.open();
    await until(
      async () => ended('limited').size,
      (n) => n === 6,
      30_000,
      'every job to run after the leases end',
    );
    await until(jobsLeft, (n) => n === 0, 5_000, 'the last completions');
    // The killed process's holds end when the reaper takes its jobs back, not before.
    expect(mostAtOnce(await holds('limited'))).toBe(3);
    expect(handlersAtOnce('limited', cutAt)).toBeLessThanOrEqual(3);
  }, 60_000);
});

describe('round two: tenants that take turns, limits per tenant from data, batch handlers — two sidecars of different sizes and the Worker', () => {
  it('fair: true: a backlog of one key does not delay the others beyond a round or so', async () => {
    await startSidecars(1, { CONCURRENCY: '2' });
    await startSidecars(1, { CONCURRENCY: '4' });
    await warmUp();
    // A's 60 jobs were enqueued first, B's and C's 4 each after them, all before any drainer looked.
    await Promise.all(
      sidecars.map((s) =>
        fetch(`${s.url}/kinds/fair-work/pause`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } }),
      ),
    );
    await enqueueMany(
      t.db,
      Array.from({ length: 60 }, (_, n) => ({
        kind: 'fair-work',
        payload: { recorder: recorderUrl, ms: 30, n },
        groupKey: 'A',
      })),
    );
    await enqueueMany(
      t.db,
      ['B', 'C'].flatMap((key, k) =>
        Array.from({ length: 4 }, (_, i) => ({
          kind: 'fair-work',
          payload: { recorder: recorderUrl, ms: 30, n: 100 + k * 10 + i },
          groupKey: key,
        })),
      ),
    );
    await fetch(`${sidecars[0]!.url}/kinds/fair-work/resume`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    await cronUntil(() => ended('fair-work').size === 68, 60_000);
    await until(
      async () => ended('fair-work').size,
      (n) => n === 68,
      20_000,
      'every fair job to run',
    );
    const order = events
      .filter((e) => e.kind === 'fair-work' && e.phase === 'start')
      .sort((a, b) => a.at - b.at)
      .map((e) => e.key);
    // Unfair (claim order) would run all 60 of A first; taking turns, B's and C's 8 are done early.
    const lastOfOthers = Math.max(...order.map((key, i) => (key === 'A' ? -1 : i)));
    expect(lastOfOthers).toBeLessThan(30);
  }, 120_000);

  it("limits per tenant from data: a key's own concurrency holds on every drainer, and a change holds at the next claim", async () => {
    await startSidecars(1, { CONCURRENCY: '2' });
    await startSidecars(1, { CONCURRENCY: '4' });
    await warmUp();
    const put = (concurrency: number) =>
      fetch(`${sidecars[1]!.url}/kinds/grouped/groups/paying/limits`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ concurrency }),
      });
    expect((await put(3)).status).toBe(200);
    const wave = (from: number) =>
      enqueueMany(t.db, [
        ...Array.from({ length: 9 }, (_, i) => ({
          kind: 'grouped',
          payload: { recorder: recorderUrl, ms: 300, n: from + i },
          groupKey: 'paying',
        })),
        ...Array.from({ length: 3 }, (_, i) => ({
          kind: 'grouped',
          payload: { recorder: recorderUrl, ms: 300, n: from + 100 + i },
          groupKey: 'free',
        })),
      ]);
    await wave(0);
    await cronUntil(() => ended('grouped').size === 12, 60_000);
    await until(
      async () => ended('grouped').size,
      (n) => n === 12,
      20_000,
      'the first wave',
    );
    await until(jobsLeft, (n) => n === 0, 5_000, 'the first wave settled');
    const first = await holds('grouped');
    expect(mostAtOnce(first.filter((h) => h.key === 'paying'))).toBe(3);
    expect(mostAtOnce(first.filter((h) => h.key === 'free'))).toBe(1);
    // Lowered to 1 while every drainer runs: the second wave runs one at a time.
    expect((await put(1)).status).toBe(200);
    const since = Date.now();
    await wave(1000);
    await cronUntil(() => ended('grouped').size === 24, 60_000);
    await until(
      async () => ended('grouped').size,
      (n) => n === 24,
      30_000,
      'the second wave',
    );
    const second = (await holds('grouped')).filter((h) => h.from >= since - 50);
    expect(mostAtOnce(second.filter((h) => h.key === 'paying'))).toBe(1);
  }, 120_000);

  it('a batch kind: 200 jobs in about 200/size calls across the drainers, the failing one retried alone', async () => {
    await startSidecars(1, { CONCURRENCY: '2' });
    await startSidecars(1, { CONCURRENCY: '4' });
    await Promise.all(
      sidecars.map((s) =>
        fetch(`${s.url}/kinds/batched/pause`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } }),
      ),
    );
    await enqueueMany(
      t.db,
      Array.from({ length: 200 }, (_, n) => ({ kind: 'batched', payload: { recorder: recorderUrl, ms: 0, n } })),
    );
    await fetch(`${sidecars[0]!.url}/kinds/batched/resume`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    await cronUntil(() => events.filter((e) => e.kind === 'batched' && e.phase === 'call').length >= 4, 20_000);
    await until(jobsLeft, (n) => n === 0, 30_000, 'every batched job to complete');
    const calls = events.filter((e) => e.kind === 'batched' && e.phase === 'call') as unknown as {
      ns: number[];
      attempts: number[];
    }[];
    const items = calls.flatMap((c) => c.ns);
    // Every job once in a call, and n = 7 once more, alone (its retry).
    expect(items.length).toBe(201);
    expect(new Set(items).size).toBe(200);
    expect(calls.length).toBeLessThanOrEqual(8);
    expect(
      calls
        .filter((c) => c.ns.includes(7))
        .map((c) => c.ns.length)
        .at(-1),
    ).toBe(1);
    expect(
      await t.query(`SELECT count(*)::int AS n FROM public.job_log WHERE kind = 'batched' AND status = 'deleted'`),
    ).toEqual([{ n: 200 }]);
  }, 90_000);
});
