// The sidecar as a real child process against a real PostgreSQL: wake-ups, the poll backstop,
// crashes, graceful shutdown, database restarts, and `npm start` on the embedded database.
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { startEmbeddedPostgres } from '../src/db/embedded.ts';
import { migrateDatabase } from '../src/db/migrate.ts';
import { type Db, enqueue, enqueueMany } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { sleep, until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const TOKEN = 'sidecar-test-token-0123456789';
const COUNTING_FIXTURE = fileURLToPath(new URL('./fixtures/sidecar-counting-runs.ts', import.meta.url));

let t: TestDatabase;
const running: SidecarProcess[] = [];
const start = async (env: Record<string, string>) => {
  const p = await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, ...env });
  running.push(p);
  return p;
};

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());
beforeEach(async () => {
  await resetQueue(t);
  await t.query('DROP TABLE IF EXISTS test_runs');
});
afterEach(async () => {
  for (const p of running.splice(0)) {
    p.kill();
    await p.exited;
  }
});

const runs = () =>
  t.query<{ job_id: string; attempt: number; finished: boolean; latency_ms: number; late_ms: number }>(
    `SELECT job_id::text, attempt, finished_at IS NOT NULL AS finished,
            (extract(epoch from started_at - enqueued_at) * 1000)::float8 AS latency_ms,
            (extract(epoch from started_at - run_at) * 1000)::float8 AS late_ms
       FROM test_runs ORDER BY started_at`,
  );
const jobCount = async (where = 'true') =>
  (await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE ${where}`))[0]!.n as number;

describe('npm start on the embedded PostgreSQL', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = path.join(await mkdtemp(path.join(os.tmpdir(), 'pgdrain-sidecar-')), 'data');
    await chmod(path.dirname(dataDir), 0o755);
  });
  afterAll(() => rm(path.dirname(dataDir), { recursive: true, force: true }));

  it('starts its own database, says where its generated token is (never the token), runs jobs, and keeps data and token across a restart', async () => {
    // A read-only scoped token and no API_TOKEN: an admin token is generated all the same.
    const env = { PGDRAIN_DATA_DIR: dataDir, API_TOKENS: 'read:read-only-token-0123456789' };
    const first = await startSidecarProcess(env);
    running.push(first);
    const tokenFile = path.join(dataDir, 'api-token');
    const token = (await readFile(tokenFile, 'utf8')).trim();
    expect((await stat(tokenFile)).mode & 0o777).toBe(0o600);
    expect(await first.waitForOutput(/"tokenFile":"([^"]+)".*"msg":"API token generated and saved in its file/)).toBe(
      tokenFile,
    );
    // JSON mode: every line is a log line; none carries the token.
    expect(
      first
        .stdout()
        .split('\n')
        .filter((l) => l.trim() && !l.startsWith('{')),
    ).toEqual([]);
    expect((await fetch(`${first.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${first.url}/`)).headers.get('content-type')).toMatch(/^text\/html/);
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const now = await (
      await fetch(`${first.url}/jobs`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ kind: 'noop', payload: { n: 1 } }),
      })
    ).json();
    const later = await (
      await fetch(`${first.url}/jobs`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ kind: 'noop', payload: { n: 2 }, delaySeconds: 3600 }),
      })
    ).json();
    await until(
      () => fetch(`${first.url}/jobs/${now.id}`, { headers }).then((r) => r.status),
      (s) => s === 404,
      5_000,
      'the job to complete',
    );
    expect(first.stdout()).not.toContain(token);

    first.child.kill('SIGTERM');
    expect(await first.exited).toEqual({ code: 0, signal: null });

    const second = await startSidecarProcess(env);
    running.push(second);
    expect(second.stdout()).not.toContain('API token generated');
    const res = await fetch(`${second.url}/jobs/${later.id}`, { headers });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: later.id, status: 'pending', payload: { n: 2 } });
    second.child.kill('SIGTERM');
    expect((await second.exited).code).toBe(0);
  });
});

describe('npm start under a supervisor', () => {
  // docker stop, a process manager: SIGTERM goes to npm, the process they started. npm passes it
  // to the script's command; a shell that did not exec it died and left the sidecar running,
  // orphaned, until a SIGKILL ended it without its shutdown. A Ctrl-C or systemd signals the whole
  // process group instead: the sidecar then hears the signal twice, from the kernel and from npm.
  const npmStart = async () => {
    const npm = spawn('npm', ['start'], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: t.url, API_TOKEN: TOKEN, PORT: '0', LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
      // A process group of its own, like a container's: the cleanup ends whatever is left.
      detached: true,
    });
    let out = '';
    npm.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    npm.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
    const cleanup = () => {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // The group is gone: nothing was left running.
      }
    };
    try {
      const url = await until(
        async () => /"url":"(http:[^"]+)"[^\n]*"msg":"sidecar started"/.exec(out)?.[1],
        (u) => u !== undefined,
        60_000,
        'npm start to start the sidecar',
      );
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      return { npm, url, exited, output: () => out, cleanup };
    } catch (error) {
      cleanup();
      throw error;
    }
  };
  const expectGracefulStop = async (s: Awaited<ReturnType<typeof npmStart>>) => {
    await s.exited;
    await until(
      async () => /"msg":"stopped"/.test(s.output()),
      (stopped) => stopped,
      15_000,
      'the sidecar to log its graceful stop',
    );
    expect(s.output()).not.toContain('exiting now');
    await expect(fetch(`${s.url}/healthz`)).rejects.toThrow();
  };

  it('a SIGTERM to npm reaches the sidecar: it shuts down gracefully and its port closes', async () => {
    const s = await npmStart();
    try {
      s.npm.kill('SIGTERM');
      await expectGracefulStop(s);
    } finally {
      s.cleanup();
    }
  });

  it('a SIGTERM to the whole process group (heard twice) is one graceful shutdown, not a forced exit', async () => {
    const s = await npmStart();
    try {
      process.kill(-s.npm.pid!, 'SIGTERM');
      await expectGracefulStop(s);
    } finally {
      s.cleanup();
    }
  });
});

describe('with DATABASE_URL', () => {
  it('an idle sidecar starts an enqueued job within milliseconds (NOTIFY, not the poll)', async () => {
    // A minute of counts older than the retention: the reaper's first round folds it into the totals.
    await t.query(
      `INSERT INTO pgdrain.job_counts (minute, kind, completed, failed, dead) VALUES (date_trunc('minute', now()) - interval '2 days', 'record', 40, 2, 1)`,
    );
    // A poll of 10 s: a job the poll found would start up to 10 s late; NOTIFY starts it within a
    // few milliseconds, and the bound below leaves room for a loaded machine (CI) without letting
    // the poll pass for it (five jobs each within 1 s of a 10 s poll by chance: 1 in 100,000).
    await start({ POLL_INTERVAL_MS: '10000' });
    expect(await t.query(`SELECT kind, completed::int, failed::int, dead::int FROM pgdrain.job_totals`)).toEqual([
      { kind: 'record', completed: 40, failed: 2, dead: 1 },
    ]);
    expect(
      await t.query(`SELECT count(*)::int AS n FROM pgdrain.job_counts WHERE minute < now() - interval '1 day'`),
    ).toEqual([{ n: 0 }]);
    await sleep(500);
    for (let i = 0; i < 5; i++) {
      await enqueue(t.db, { kind: 'record', payload: {} });
      await sleep(150);
    }
    const done = await until(runs, (r) => r.length === 5, 5_000, 'five runs');
    for (const r of done) expect(r.latency_ms).toBeLessThan(1_000);
  });

  it('a job enqueued from plain SQL with pgdrain.enqueue() wakes the sidecar by NOTIFY and runs', async () => {
    // A poll far longer than the wait below: only the notification can start this job in time.
    await start({ POLL_INTERVAL_MS: '600000' });
    await sleep(300);
    const [{ id }] = (await t.query(`SELECT pgdrain.enqueue('record', '{}')::text AS id`)) as [{ id: string }];
    const [run] = await until(runs, (r) => r.length === 1, 5_000, 'the SQL-enqueued job to run');
    expect(run!.job_id).toBe(id);
    await until(
      () => jobCount(),
      (n) => n === 0,
      5_000,
      'the job to complete',
    );
  });

  it('a kind paused through one sidecar is claimed by no sidecar while others drain; resumed through another, it runs', async () => {
    const [a, b] = await Promise.all([start({ POLL_INTERVAL_MS: '200' }), start({ POLL_INTERVAL_MS: '200' })]);
    const call = (p: SidecarProcess, path: string) =>
      fetch(`${p.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(await (await call(a!, '/kinds/record/pause')).json()).toEqual({ kind: 'record', paused: true });
    await enqueueMany(t.db, [
      ...Array.from({ length: 3 }, () => ({ kind: 'record', payload: {} })),
      ...Array.from({ length: 3 }, () => ({ kind: 'noop', payload: {} })),
    ]);
    await until(
      () => jobCount(`kind = 'noop'`),
      (n) => n === 0,
      5_000,
      'the noop jobs to run',
    );
    await sleep(1_000); // five polls of each sidecar
    expect(await jobCount(`kind = 'record' AND status = 'pending' AND attempts = 0`)).toBe(3);
    expect(await t.query('SELECT count(*)::int AS n FROM test_runs').catch(() => [{ n: 0 }])).toEqual([{ n: 0 }]);
    expect(await (await call(b!, '/kinds/record/resume')).json()).toEqual({ kind: 'record', paused: false });
    await until(
      () => jobCount(),
      (n) => n === 0,
      5_000,
      'the record jobs to run after resume',
    );
    expect((await runs()).length).toBe(3);
  });

  it('with its LISTEN connection killed, jobs still run by the poll, and NOTIFY works again after the reconnect', async () => {
    const p = await start({ POLL_INTERVAL_MS: '700' });
    const listenerPid = async () =>
      (
        await t.query(
          `SELECT pid FROM pg_stat_activity WHERE application_name = 'pgdrain-listener' AND datname = current_database()`,
        )
      )[0]?.pid as number | undefined;
    const oldPid = await until(listenerPid, (pid) => pid !== undefined, 5_000, 'the listener');
    await t.query('SELECT pg_terminate_backend($1)', [oldPid]);
    // A job whose notification is lost (inserted without one): only the poll can find it.
    await t.query(`INSERT INTO pgdrain.jobs (kind, payload) VALUES ('record', '{}')`);
    const [polled] = await until(runs, (r) => r.length === 1, 3_000, 'the polled job');
    expect(polled!.latency_ms).toBeLessThan(700 + 500);

    const newPid = await until(
      listenerPid,
      (pid) => pid !== undefined && pid !== oldPid,
      10_000,
      'the listener to reconnect',
    );
    expect(newPid).not.toBe(oldPid);
    await p.waitForOutput(/listener down[\s\S]*listener up/);
    await sleep(800); // let the reconnect's own wake-up drain pass
    for (let i = 0; i < 3; i++) {
      await enqueue(t.db, { kind: 'record', payload: {} });
      await sleep(100);
    }
    const all = await until(runs, (r) => r.length === 4, 3_000, 'the notified jobs');
    for (const r of all.slice(1)) expect(r.latency_ms).toBeLessThan(250);
  });

  it('RECORD_COUNTS=false: jobs run, nothing is counted, and the dashboard says why its chart is empty', async () => {
    const p = await start({ RECORD_COUNTS: 'false' });
    await enqueueMany(
      t.db,
      Array.from({ length: 5 }, () => ({ kind: 'record', payload: {} })),
    );
    await until(
      () => jobCount(),
      (n) => n === 0,
      5_000,
      'the jobs to complete',
    );
    expect((await runs()).length).toBe(5);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.job_counts')).toEqual([{ n: 0 }]);
    expect(await (await fetch(p.url)).text()).toContain('Counting is off');
    const bad = await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, RECORD_COUNTS: 'no' }).catch(
      (e: Error) => e,
    );
    expect(bad).toBeInstanceOf(Error);
    expect((bad as Error).message).toContain('RECORD_COUNTS: must be true or false');
  });

  it('a slow handler holds nothing back: quick jobs enqueued while it runs start at once (NOTIFY), a delayed one when due (the poll), all before it ends', async () => {
    await start({ POLL_INTERVAL_MS: '300' });
    const slow = await enqueue(t.db, { kind: 'record', payload: { ms: 6_000 } });
    await until(runs, (r) => r.length === 1, 5_000, 'the slow job to start');
    const quick: string[] = [];
    for (let i = 0; i < 3; i++) {
      quick.push((await enqueue(t.db, { kind: 'record', payload: {} })).id);
      await sleep(300);
    }
    const delayed = await enqueue(t.db, { kind: 'record', payload: {}, runAt: new Date(Date.now() + 1_000) });
    const done = await until(
      runs,
      (r) => r.filter((x) => x.finished).length === 4,
      5_000,
      'the quick and the delayed jobs',
    );
    // All of them ran while the slow one was still running.
    expect(done.find((r) => r.job_id === slow.id)).toMatchObject({ finished: false });
    for (const id of quick) expect(done.find((r) => r.job_id === id)!.latency_ms).toBeLessThan(1_000);
    expect(done.find((r) => r.job_id === delayed.id)!.late_ms).toBeLessThan(1_500);
  });

  it('a delayed job runs within one poll interval of its run_at, with no notification', async () => {
    const p = await start({ POLL_INTERVAL_MS: '400' });
    const sent = Date.now();
    const res = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'record', payload: {}, delaySeconds: 2 }),
    });
    expect(res.status).toBe(201);
    const [run] = await until(runs, (r) => r.length === 1, 5_000, 'the delayed job');
    expect(run!.late_ms).toBeGreaterThanOrEqual(0);
    expect(run!.late_ms).toBeLessThan(400 + 300);
    // The delay counts from the request (the API computes run_at), not from the row's created_at,
    // which the database stamps a little later: compare the start with the time of sending.
    const [{ started_ms }] = (await t.query<{ started_ms: number }>(
      `SELECT extract(epoch from started_at)::float8 * 1000 AS started_ms FROM test_runs`,
    )) as [{ started_ms: number }];
    expect(started_ms - sent).toBeGreaterThanOrEqual(2_000);
  });

  it('kill -9 mid-batch loses nothing: after a restart and the visibility timeout every job completes, duplicates only for jobs in flight', async () => {
    const env = {
      BATCH_SIZE: '4',
      CONCURRENCY: '4',
      VISIBILITY_TIMEOUT_SECONDS: '2',
      REAP_INTERVAL_MS: '300',
      POLL_INTERVAL_MS: '300',
    };
    const jobs = await enqueueMany(
      t.db,
      Array.from({ length: 24 }, () => ({ kind: 'record', payload: { ms: 400 } })),
    );
    const first = await start(env);
    await until(
      runs,
      (r) => r.filter((x) => x.finished).length >= 4 && r.some((x) => !x.finished),
      10_000,
      'a batch in flight',
    );
    first.child.kill('SIGKILL');
    await first.exited;
    // In flight: claimed by the dead process and not yet settled (running, or finished but not yet
    // deleted). Only these may run twice.
    const inFlight = new Set(
      (await t.query<{ id: string }>(`SELECT id::text FROM pgdrain.jobs WHERE status = 'running'`)).map((r) => r.id),
    );
    expect(inFlight.size).toBeGreaterThan(0);
    expect((await runs()).some((r) => !r.finished)).toBe(true);

    await start(env);
    await until(
      () => jobCount(),
      (n) => n === 0,
      20_000,
      'every job to complete',
    );
    const after = await runs();
    const finishedIds = new Set(after.filter((r) => r.finished).map((r) => r.job_id));
    expect([...finishedIds].sort()).toEqual(jobs.map((j) => j.id).sort());
    const startsPerJob = new Map<string, number>();
    for (const r of after) startsPerJob.set(r.job_id, (startsPerJob.get(r.job_id) ?? 0) + 1);
    const duplicated = [...startsPerJob].filter(([, n]) => n > 1).map(([id]) => id);
    for (const id of duplicated) expect(inFlight.has(id)).toBe(true);
    // Counted exactly once each: every job completed once, and each reaped attempt as a failure.
    expect(
      await t.query(
        `SELECT sum(completed)::int AS completed, sum(failed)::int AS failed, sum(dead)::int AS dead FROM pgdrain.job_counts`,
      ),
    ).toEqual([{ completed: 24, failed: inFlight.size, dead: 0 }]);
  });

  it('with the default 30 s visibility and lease renewal, a kill -9 with 200 jobs in hand is recovered by a restarted sidecar within 60 s, no manual step', async () => {
    const jobs = await enqueueMany(
      t.db,
      Array.from({ length: 200 }, () => ({ kind: 'record', payload: { ms: 1000 } })),
    );
    const first = await start({ POLL_INTERVAL_MS: '200' });
    await until(runs, (r) => r.length >= 100, 10_000, 'the first sidecar to be running its batch');
    first.child.kill('SIGKILL');
    await first.exited;
    const killedAt = Date.now();
    const inFlight = new Set(
      (await t.query<{ id: string }>(`SELECT id::text FROM pgdrain.jobs WHERE status = 'running'`)).map((r) => r.id),
    );
    expect(inFlight.size).toBeGreaterThan(0);
    await start({ POLL_INTERVAL_MS: '200' });
    await until(
      () => jobCount(),
      (n) => n === 0,
      60_000,
      'every job to complete within 60 s of the kill',
    );
    const recoveredMs = Date.now() - killedAt;
    console.log(
      `kill -9 with ${inFlight.size} jobs in hand: all 200 jobs done ${(recoveredMs / 1000).toFixed(1)} s after the kill`,
    );
    expect(recoveredMs).toBeLessThan(60_000);
    const finished = new Set((await runs()).filter((r) => r.finished).map((r) => r.job_id));
    expect(finished.size).toBe(200);
    expect([...finished].sort()).toEqual(jobs.map((j) => j.id).sort());
  }, 90_000);

  it('a handler slower than the visibility timeout but alive is never run twice: its lease is renewed while two sidecars reap', async () => {
    const env = { VISIBILITY_TIMEOUT_SECONDS: '2', REAP_INTERVAL_MS: '300', POLL_INTERVAL_MS: '200' };
    await Promise.all([start(env), start(env)]);
    const jobs = await enqueueMany(
      t.db,
      Array.from({ length: 4 }, () => ({ kind: 'record', payload: { ms: 5000 } })),
    );
    await until(
      () => jobCount(),
      (n) => n === 0,
      20_000,
      'the slow jobs to complete',
    );
    const all = await runs();
    expect(all.map((r) => r.job_id).sort()).toEqual(jobs.map((j) => j.id).sort()); // one run each
    expect(all.every((r) => r.finished && r.attempt === 1)).toBe(true);
  }, 30_000);

  it('SIGTERM with a handler that ignores its signal: abandoned after the grace, its job pending again at once, exit 0, nothing logged as an error', async () => {
    const p = await start({ SHUTDOWN_GRACE_MS: '1000', POLL_INTERVAL_MS: '200' });
    // `record` sleeps for `ms` and never looks at its signal.
    const [job] = await enqueueMany(t.db, [{ kind: 'record', payload: { ms: 30_000 } }]);
    await until(runs, (r) => r.length === 1, 5_000, 'the handler to start');
    const signalled = Date.now();
    p.child.kill('SIGTERM');
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - signalled).toBeLessThan(1_000 + 4_000);
    // Not stuck `running` until a reaper: pending now, its attempt refunded, the reason kept.
    expect(
      await t.query(`SELECT id::text, status, attempts, locked_by, locked_until, last_error FROM pgdrain.jobs`),
    ).toEqual([
      {
        id: job!.id,
        status: 'pending',
        attempts: 0,
        locked_by: null,
        locked_until: null,
        last_error: 'the drainer shut down before the handler finished; released to run again',
      },
    ]);
    const levels = p
      .stdout()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(levels.filter((l) => l.level >= 50)).toEqual([]);
    expect(levels.map((l) => l.msg)).toContain(
      'grace period over with handlers still running: they were abandoned and their jobs released to run again',
    );
  });

  it('a second SIGTERM within a second of the first is the same request; one after that exits at once (130)', async () => {
    const p = await start({ SHUTDOWN_GRACE_MS: '20000', POLL_INTERVAL_MS: '200' });
    await enqueueMany(t.db, [{ kind: 'record', payload: { ms: 30_000 } }]);
    await until(runs, (r) => r.length === 1, 5_000, 'the handler to start');
    p.child.kill('SIGTERM');
    await p.waitForOutput(/shutting down: no new claims/);
    p.child.kill('SIGTERM');
    await sleep(300);
    expect(p.child.exitCode).toBeNull();
    await sleep(1_000);
    p.child.kill('SIGTERM');
    expect(await p.exited).toEqual({ code: 130, signal: null });
    expect(p.stdout()).toContain('second SIGTERM: exiting now');
  });

  it("two sidecars with different visibility timeouts: the short one's reaper never takes the long one's live jobs", async () => {
    // A rolling config change: the jobs run on a sidecar with 30 s leases, next to one whose own
    // default is 6 s and which reaps every 300 ms. Each 8 s job must run exactly once.
    await start({ VISIBILITY_TIMEOUT_SECONDS: '30', POLL_INTERVAL_MS: '200' });
    const jobs = await enqueueMany(
      t.db,
      Array.from({ length: 10 }, () => ({ kind: 'record', payload: { ms: 8000 } })),
    );
    await until(runs, (r) => r.length === 10, 5_000, 'the long-lease sidecar to start every job');
    await start({ VISIBILITY_TIMEOUT_SECONDS: '6', REAP_INTERVAL_MS: '300', POLL_INTERVAL_MS: '200' });
    await until(
      () => jobCount(),
      (n) => n === 0,
      20_000,
      'the jobs to complete',
    );
    const all = await runs();
    expect(all.map((r) => r.job_id).sort()).toEqual(jobs.map((j) => j.id).sort()); // one run each
    expect(all.every((r) => r.finished && r.attempt === 1)).toBe(true);
  }, 40_000);

  it('SIGTERM mid-batch: running handlers finish, unstarted claimed jobs are released with attempts refunded, exit 0', async () => {
    await enqueueMany(
      t.db,
      Array.from({ length: 20 }, () => ({ kind: 'record', payload: { ms: 600 } })),
    );
    const p = await start({ BATCH_SIZE: '6', CONCURRENCY: '2', SHUTDOWN_GRACE_MS: '5000' });
    await until(runs, (r) => r.length >= 2, 5_000, 'handlers to start');
    await until(
      () => jobCount(`status = 'running'`),
      (n) => n > 2,
      5_000,
      'claimed jobs waiting for a slot',
    );
    const signalled = Date.now();
    p.child.kill('SIGTERM');
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - signalled).toBeLessThan(5_000);
    const after = await runs();
    expect(after.every((r) => r.finished)).toBe(true);
    expect(await jobCount(`status = 'running'`)).toBe(0);
    const completed = new Set(after.map((r) => r.job_id));
    expect(await jobCount()).toBe(20 - completed.size);
    expect(await jobCount(`status = 'pending' AND attempts = 0 AND locked_by IS NULL`)).toBe(20 - completed.size);
    expect(p.stdout()).toMatch(/"msg":"stopped"/);
  });

  it('a SIGTERM while it is still starting (its first job already running) stops it gracefully too', async () => {
    const [first] = await enqueueMany(t.db, [{ kind: 'record', payload: { ms: 300, signalSelf: true } }]);
    await enqueueMany(
      t.db,
      Array.from({ length: 5 }, () => ({ kind: 'record', payload: { ms: 300 } })),
    );
    // Without the handlers installed before the start, the process died by the signal before it said it had started.
    // The signal may come before or after it says so (its first job races the HTTP server's start);
    // either way it stops gracefully: exit 0, the running job finished, nothing left running.
    const p = await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, CONCURRENCY: '2' }, undefined, {
      untilStarted: false,
    });
    running.push(p);
    expect(await p.exited).toEqual({ code: 0, signal: null });
    const after = await runs();
    expect(after.find((r) => r.job_id === first!.id)).toMatchObject({ finished: true });
    expect(after.every((r) => r.finished)).toBe(true);
    expect(await jobCount(`status = 'running'`)).toBe(0);
    expect(await jobCount()).toBe(6 - after.length);
  });
});

describe('a database restart under load', () => {
  it('does not end the sidecar, and every committed job completes once the server is back', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-restart-'));
    await chmod(dir, 0o755);
    const settings = { fsync: 'off', synchronous_commit: 'off' };
    let server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), password: 'pw', settings });
    const port = server.port;
    await migrateDatabase(server.url);
    const pool = new pg.Pool({ connectionString: server.url, max: 2, connectionTimeoutMillis: 1000 });
    pool.on('error', () => {});
    const db = drizzle({ client: pool }) as unknown as Db;
    try {
      const p = await startSidecarProcess({
        DATABASE_URL: server.url,
        API_TOKEN: TOKEN,
        POLL_INTERVAL_MS: '200',
        VISIBILITY_TIMEOUT_SECONDS: '2',
        REAP_INTERVAL_MS: '500',
      });
      running.push(p);
      const committed: string[] = [];
      let failedEnqueues = 0;
      let producing = true;
      const producer = (async () => {
        while (producing) {
          try {
            committed.push((await enqueue(db, { kind: 'noop', payload: { at: Date.now() } })).id);
          } catch {
            failedEnqueues++;
          }
          await sleep(20);
        }
      })();
      await sleep(700);
      await server.stop();
      await sleep(1500);
      server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), password: 'pw', settings, port });
      await sleep(1500);
      producing = false;
      await producer;
      expect(failedEnqueues).toBeGreaterThan(0);
      expect(committed.length).toBeGreaterThan(20);
      await until(
        async () => Number((await pool.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).rows[0].n),
        (n) => n === 0,
        20_000,
        'the backlog to drain after the restart',
      );
      expect(p.child.exitCode).toBeNull();
      expect(p.stdout()).toMatch(/database reachable again|listener up[\s\S]*listener up/);
    } finally {
      await pool.end();
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('jobs that finish while the server is down are settled when it is back, not run again', async () => {
    // Before, their settlement failed once and they were left for the reaper: 273 of 600 such jobs
    // ran twice across a 4 s outage (.tmp trial); a blip shorter than the lease costs no repeated work.
    const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-blip-'));
    await chmod(dir, 0o755);
    const settings = { fsync: 'off' };
    let server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), password: 'pw', settings });
    const port = server.port;
    await migrateDatabase(server.url);
    const runsFile = path.join(dir, 'runs.txt');
    await writeFile(runsFile, '');
    const pool = new pg.Pool({ connectionString: server.url, max: 2, connectionTimeoutMillis: 10_000 });
    pool.on('error', () => {});
    try {
      const p = await startSidecarProcess(
        {
          DATABASE_URL: server.url,
          API_TOKEN: TOKEN,
          RUNS_FILE: runsFile,
          PGDRAIN_DATA_DIR: dir,
          CONCURRENCY: '100',
          POLL_INTERVAL_MS: '200',
          VISIBILITY_TIMEOUT_SECONDS: '10',
          REAP_INTERVAL_MS: '1000',
        },
        COUNTING_FIXTURE,
      );
      running.push(p);
      await pool.query(
        `SELECT pgdrain.enqueue('counted', jsonb_build_object('ms', 500 + (random() * 1000)::int)) FROM generate_series(1, 300)`,
      );
      // Running and finishing all the while: the server goes away under them for 3 s.
      await until(
        async () => (await readFile(runsFile, 'utf8')).length,
        (n) => n > 0,
        10_000,
        'the first runs',
      );
      await sleep(800);
      await server.stop();
      await sleep(3000);
      server = await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), password: 'pw', settings, port });
      await until(
        async () => Number((await pool.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).rows[0].n),
        (n) => n === 0,
        30_000,
        'every job to complete',
      );
      const ids = (await readFile(runsFile, 'utf8')).trim().split('\n');
      expect(new Set(ids).size).toBe(300);
      expect(ids.length - 300).toBe(0);
      expect(p.child.exitCode).toBeNull();
    } finally {
      await pool.end();
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
