// An upgrade with the old version still running, as a rolling deploy does it: the sidecar of a
// pinned earlier commit (this repository's history, checked out in a temporary folder) drains while
// the current version migrates the database and starts beside it; then the old one stops. Nothing
// is lost, nothing runs twice, and neither log has an error. docs/operations.md ("Which versions
// may run side by side") says which commit is pinned and when it moves.
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrateDatabase } from '../src/db/migrate.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { WAVE5 } from './support/shipped-migrations.ts';
import { sleep, until } from './support/time.ts';

/** The oldest version that may run beside this one (docs/operations.md). */
const OLDEST_SIDE_BY_SIDE = WAVE5;
const REPO = fileURLToPath(new URL('..', import.meta.url));

let t: TestDatabase;
let oldTree: string;
const sidecars: SidecarProcess[] = [];
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  oldTree = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-old-'));
  // The old version's files, with this checkout's packages (its lockfile's versions are the same).
  const archive = execFileSync(
    'git',
    [
      '-C',
      REPO,
      'archive',
      '--format=tar',
      OLDEST_SIDE_BY_SIDE,
      'src',
      'drizzle',
      'scripts',
      'test/fixtures',
      'package.json',
    ],
    {
      maxBuffer: 256 * 1024 * 1024,
    },
  );
  execFileSync('tar', ['-x', '-C', oldTree], { input: archive });
  await symlink(path.join(REPO, 'node_modules'), path.join(oldTree, 'node_modules'));
  // Its dashboard script, generated (not in git), as its `npm start` would.
  execFileSync(process.execPath, ['scripts/build-dashboard.mjs'], { cwd: oldTree });
}, 60_000);
afterAll(async () => {
  for (const sidecar of sidecars) sidecar.kill();
  await t?.close();
  if (oldTree) await rm(oldTree, { recursive: true, force: true });
});

/** `promise`, or an error after `ms` naming `what` (and the sidecars' logs' ends), not a hung test. */
async function within<T>(promise: Promise<T>, ms: number, what: string, more = () => ''): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(async () => {
          const tails = sidecars.map((s, i) => `--- sidecar ${i}:\n${s.stdout().slice(-3000)}`).join('\n');
          // What each session of the database waits on, to name what held the step up.
          const sessions = await t
            .query(
              `SELECT pid, application_name, state, wait_event_type, wait_event, backend_xmin,
                      now() - xact_start AS in_transaction, left(query, 160) AS query
                 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
            )
            .then((rows) => JSON.stringify(rows, null, 1))
            .catch((error: Error) => error.message);
          reject(new Error(`${what} took more than ${ms} ms ${more()}\n${tails}\n--- sessions:\n${sessions}`));
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Errors in a sidecar's JSON log (pino levels 50 and 60). */
const errorsIn = (log: string) => log.split('\n').filter((line) => /"level":(50|60)/.test(line));

it(`the sidecar of ${OLDEST_SIDE_BY_SIDE} drains while this version migrates and starts beside it: every job once, no error`, async () => {
  const dataDir = (name: string) => path.join(oldTree, `.data-${name}`);
  await mkdir(dataDir('old'));
  await mkdir(dataDir('new'));
  const env = (name: string) => ({
    DATABASE_URL: t.url,
    PGDRAIN_DATA_DIR: dataDir(name),
    API_TOKEN: `side-by-side-${name}-token`,
    LOG_FORMAT: 'json',
    POLL_INTERVAL_MS: '200',
  });
  const old = await startSidecarProcess(
    env('old'),
    path.join(oldTree, 'test', 'fixtures', 'sidecar-with-test-kinds.ts'),
  );
  sidecars.push(old);
  // An application enqueues from SQL all along, every 50 ms: 20 jobs, and 5 that wait for one of them
  // each (`after`: the drainer that completes the first releases the second, whichever version).
  let enqueued = 0;
  let enqueuing = true;
  const producer = (async () => {
    while (enqueuing) {
      const [{ n }] = (await t.query(`
        WITH first AS (SELECT pgdrain.enqueue('record', '{"ms": 2}') AS id FROM generate_series(1, 20)),
        second AS (SELECT pgdrain.enqueue('record', '{}', after => ARRAY[id]) AS id FROM (SELECT id FROM first LIMIT 5) f)
        SELECT (SELECT count(*) FROM first)::int + (SELECT count(*) FROM second)::int AS n`)) as [{ n: number }];
      expect(n).toBe(25);
      enqueued += n;
      await sleep(50);
    }
  })();
  const ran = async () => (await t.query<{ n: number }>('SELECT count(*)::int AS n FROM test_runs'))[0]!.n;
  try {
    await until(ran, (n) => n >= 300, 30_000, 'the old sidecar to drain');
    // The deploy: the new version migrates while the old one drains, then starts beside it.
    const busy: string[] = [];
    const migrateStarted = performance.now();
    const report = await within(
      migrateDatabase(t.url, { onLockBusy: (migration, tries) => busy.push(`${migration} ×${tries}`) }),
      30_000,
      'the migration',
      () => `lock busy: ${busy.join(', ') || 'never'}`,
    );
    console.log(
      `side by side: migrated in ${Math.round(performance.now() - migrateStarted)} ms; lock busy: ${busy.join(', ') || 'never'}`,
    );
    expect(report.migrations.length).toBeGreaterThan(0);
    const current = await startSidecarProcess(env('new'));
    sidecars.push(current);
    const before = await t.query<{ pid: number; n: number }>(
      'SELECT pid, count(*)::int AS n FROM test_runs GROUP BY pid',
    );
    await until(
      () => t.query<{ n: number }>('SELECT count(*)::int AS n FROM test_runs WHERE pid = $1', [current.child.pid]),
      (rows) => rows[0]!.n >= 200,
      30_000,
      'the new sidecar to drain beside the old one',
    );
    // Both drained after the migration.
    const oldAfter = (
      await t.query<{ n: number }>('SELECT count(*)::int AS n FROM test_runs WHERE pid = $1', [old.child.pid])
    )[0]!.n;
    expect(oldAfter).toBeGreaterThan(before.find((r) => r.pid === old.child.pid)?.n ?? 0);
    // The old one stops, gracefully.
    old.child.kill('SIGTERM');
    expect(await within(old.exited, 20_000, 'the old sidecar to stop')).toEqual({ code: 0, signal: null });
    await sleep(500);
    enqueuing = false;
    await within(producer, 10_000, 'the producer to stop');
    await until(
      () => t.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgdrain.jobs`),
      (rows) => rows[0]!.n === 0,
      30_000,
      'the new sidecar to drain the rest',
    );
    const [runs] = await t.query<{ runs: number; jobs: number; unfinished: number }>(
      `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS jobs,
              count(*) FILTER (WHERE finished_at IS NULL)::int AS unfinished FROM test_runs`,
    );
    expect(runs).toEqual({ runs: enqueued, jobs: enqueued, unfinished: 0 });
    current.child.kill('SIGTERM');
    expect(await within(current.exited, 20_000, 'the new sidecar to stop')).toEqual({ code: 0, signal: null });
    expect(errorsIn(old.stdout())).toEqual([]);
    expect(errorsIn(current.stdout())).toEqual([]);
  } finally {
    enqueuing = false;
    await producer.catch(() => {});
  }
}, 120_000);
