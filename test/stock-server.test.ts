// What a stock PostgreSQL (Debian's package: JIT on, `jit_above_cost` 100000) does to the drain,
// tried on a real `pgdrain start` process with every kind of statement a drainer sends. Two
// guarantees, on whatever server the run has (CI runs this file on Debian's PostgreSQL 15 too:
// .ci/stock-postgres.ts):
//   - no statement of pgdrain's is JIT-compiled: a plan priced with a disabled node's penalty
//     (1e10 before PostgreSQL 18) passes jit_above_cost and costs 50-120 ms per execution;
//   - a kind limited to one job at a time hands its slot on when the last job's settlement returns:
//     the poll is 30 s here, so a next claim that waited for anything but the settlement would show.
// pg_stat_statements must be loaded (shared_preload_libraries): the test servers load it.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/stock/sidecar.ts', import.meta.url));
const SERIAL_KINDS = ['serial_group', 'serial_global', 'serial_fair'];
const SERIAL_JOBS = 20;
const WORKFLOWS = 5;

let t: TestDatabase;
let dir: string;
let sidecar: SidecarProcess | undefined;

beforeAll(async () => {
  t = await createTestDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-stock-'));
  await chmod(dir, 0o755);
  const [{ loaded } = { loaded: false }] = await t.query<{ loaded: boolean }>(
    `SELECT 'pg_stat_statements' = ANY(string_to_array(current_setting('shared_preload_libraries'), ', ')) AS loaded`,
  );
  if (!loaded)
    throw new Error(
      'this test reads pg_stat_statements: the server needs shared_preload_libraries = pg_stat_statements',
    );
  await t.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  // Statements inside pgdrain's SQL functions too, for this database's sessions only.
  await t.query(`ALTER DATABASE ${new URL(t.url).pathname.slice(1)} SET pg_stat_statements.track = 'all'`);
  await t.query(
    'CREATE TABLE public.serial_runs (kind text NOT NULL, n int NOT NULL, started_ms float8 NOT NULL, ended_ms float8 NOT NULL)',
  );
  sidecar = await startSidecarProcess(
    {
      DATABASE_URL: t.url,
      API_TOKEN: 'stock-test-token-0123456789',
      PGDRAIN_DATA_DIR: dir,
      POLL_INTERVAL_MS: '30000',
      REAP_INTERVAL_MS: '500',
    },
    SIDECAR,
  );
}, 60_000);

afterAll(async () => {
  sidecar?.kill();
  await sidecar?.exited;
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('on this server, with its default settings', () => {
  it('drains every kind of job: serial kinds back to back, and no statement of pgdrain JIT-compiled', async () => {
    // Everything in one transaction, from SQL, while the drainer idles (a burst into an idle table).
    await t.query(`
      SELECT pgdrain.enqueue(k.kind, jsonb_build_object('n', i), now(), 3, NULL, 0, CASE WHEN k.kind IN ('serial_group', 'serial_fair') THEN 'one' END)
        FROM unnest(ARRAY['serial_group', 'serial_global', 'serial_fair']) AS k(kind), generate_series(1, ${SERIAL_JOBS}) AS i;
      SELECT pgdrain.enqueue('quick', jsonb_build_object('n', i)) FROM generate_series(1, 2000) AS i;
      SELECT pgdrain.enqueue('batched', jsonb_build_object('n', i)) FROM generate_series(1, 200) AS i;
      SELECT pgdrain.enqueue('flaky', jsonb_build_object('n', i)) FROM generate_series(1, 20) AS i;
      SELECT pgdrain.enqueue('wf', jsonb_build_object('n', i)) FROM generate_series(1, ${WORKFLOWS}) AS i;`);

    // The workflows wait for their events once their sleep and child are done; send them from SQL.
    await until(
      () =>
        t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pgdrain.workflow_steps WHERE name = 'go' AND status = 'waiting'`,
        ),
      (r) => r[0]!.n === WORKFLOWS,
      60_000,
      'every workflow waiting for its event',
    );
    await t.query(
      `SELECT pgdrain.send_event('stock.go', 'run:' || i, '{"go": 1}') FROM generate_series(1, ${WORKFLOWS}) AS i`,
    );

    const left = await until(
      () =>
        t.query<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM pgdrain.jobs GROUP BY status`),
      (rows) => rows.length === 0,
      90_000,
      'every job finished',
    );
    expect(left).toEqual([]);
    const finished = await t.query<{ kind: string; status: string; n: number }>(
      `SELECT kind, status, count(*)::int AS n FROM pgdrain.job_history GROUP BY kind, status ORDER BY kind`,
    );
    expect(finished).toEqual([
      { kind: 'kept', status: 'completed', n: WORKFLOWS },
      { kind: 'wf', status: 'completed', n: WORKFLOWS },
    ]);
    const results = await t.query<{ result: { a: number; child: { doubled: number }; event: { go: number } } }>(
      `SELECT result FROM pgdrain.job_history WHERE kind = 'wf'`,
    );
    for (const { result } of results) expect(result.child.doubled).toBe(result.a * 2);

    // Serial kinds: each job once, never two at once, each next one started as the last one's
    // settlement returned (a median gap far below the 30 s poll and any recheck).
    const runs = await t.query<{ kind: string; n: number; started_ms: number; ended_ms: number }>(
      `SELECT * FROM public.serial_runs ORDER BY kind, started_ms`,
    );
    for (const kind of SERIAL_KINDS) {
      const mine = runs.filter((r) => r.kind === kind);
      expect(
        mine.map((r) => r.n).sort((a, b) => a - b),
        kind,
      ).toEqual(Array.from({ length: SERIAL_JOBS }, (_, i) => i + 1));
      const gaps = mine.slice(1).map((r, i) => r.started_ms - mine[i]!.ended_ms);
      expect(Math.min(...gaps), `${kind}: two ran at once`).toBeGreaterThanOrEqual(0);
      const median = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)]!;
      expect(median, `${kind}: median gap between one job's end and the next one's start (ms)`).toBeLessThan(200);
    }

    // Give the reaper and housekeeping a round, then read what every statement cost.
    await new Promise((r) => setTimeout(r, 1_500));
    const statements = await t.query<{ query: string; calls: number; jit_functions: number; mean_ms: number }>(
      `SELECT query, calls::int, jit_functions::int, round(mean_exec_time::numeric, 2)::float8 AS mean_ms
         FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    // The drainer's statements were recorded: the claims, settlements, parks and wakes among them.
    for (const fragment of ['pgdrain.claim(', 'pg_advisory_xact_lock', 'workflow_steps', 'DELETE FROM']) {
      expect(
        statements.some((s) => s.query.includes(fragment)),
        `a statement with ${fragment}`,
      ).toBe(true);
    }
    const compiled = statements
      .filter((s) => s.jit_functions > 0)
      .map((s) => ({ ...s, query: s.query.replace(/\s+/g, ' ').slice(0, 240) }));
    expect(compiled, 'statements JIT-compiled').toEqual([]);
    if (process.env.PGDRAIN_STOCK_SERVER) {
      // The run that claims to be on a stock server is: JIT is there and on.
      const [server] = await t.query<{ jit: string; available: boolean }>(
        `SELECT current_setting('jit') AS jit, pg_jit_available() AS available`,
      );
      expect(server).toEqual({ jit: 'on', available: true });
    }
  }, 150_000);
});
