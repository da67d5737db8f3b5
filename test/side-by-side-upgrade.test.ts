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
    const report = await migrateDatabase(t.url);
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
    expect(await old.exited).toEqual({ code: 0, signal: null });
    await sleep(500);
    enqueuing = false;
    await producer;
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
    expect(await current.exited).toEqual({ code: 0, signal: null });
    expect(errorsIn(old.stdout())).toEqual([]);
    expect(errorsIn(current.stdout())).toEqual([]);
  } finally {
    enqueuing = false;
    await producer.catch(() => {});
  }
}, 120_000);
