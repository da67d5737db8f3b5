// `drain 50k, N processes`: N real sidecar processes (`pgdrain start`, default settings) on one
// database, idle first, then one backlog committed at once (its NOTIFY wakes them all); timed from
// the COMMIT until the table is empty (the rows are written before, in the open transaction). Each process writes the jobs it ran when it exits, and
// every job must have run exactly once across them.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.ts';
import { NOTIFY_CHANNEL } from '../src/queries/index.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export async function drainWithProcesses(url: string, processes: number, jobs: number): Promise<{ jobsPerSecond: number; missing: number; duplicated: number }> {
  await migrateDatabase(url);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-bench-processes-'));
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  const children: { child: ChildProcess; exited: Promise<void> }[] = [];
  try {
    await pool.query('DELETE FROM pgdrain.jobs');
    for (let k = 0; k < processes; k++) {
      const child = spawn(process.execPath, [path.join(ROOT, 'src/entry/cli.ts'), 'start', '--jobs', path.join(ROOT, 'bench/fixtures/counting-jobs.ts')], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', DATABASE_URL: url, API_TOKEN: 'bench-processes-token-0123', PORT: '0', LOG_LEVEL: 'info', LOG_FORMAT: 'json', BENCH_RUNS_FILE: path.join(dir, `runs-${k}.txt`) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      children.push({ child, exited });
      // Up when its HTTP API answers (its LISTEN is set up before it serves).
      for (let waited = 0; ; waited += 100) {
        const port = /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(out)?.[1];
        if (port && (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false))) break;
        if (waited > 20_000 || child.exitCode !== null) throw new Error(`sidecar process ${k} did not start:\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const loader = await pool.connect();
    let t0: number;
    try {
      await loader.query('BEGIN');
      await loader.query(`INSERT INTO pgdrain.jobs (kind, payload) SELECT 'bench', jsonb_build_object('i', i) FROM generate_series(0, $1::int - 1) AS i`, [jobs]);
      await loader.query(`SELECT pg_notify($1, 'bench')`, [NOTIFY_CHANNEL]);
      t0 = performance.now();
      await loader.query('COMMIT');
    } finally {
      loader.release();
    }
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`);
      if (rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const seconds = (performance.now() - t0) / 1000;
    for (const { child } of children) child.kill('SIGTERM');
    await Promise.all(children.map((c) => c.exited));
    const seen = new Map<number, number>();
    for (let k = 0; k < processes; k++) {
      for (const line of (await readFile(path.join(dir, `runs-${k}.txt`), 'utf8')).split('\n').filter(Boolean)) seen.set(Number(line), (seen.get(Number(line)) ?? 0) + 1);
    }
    let missing = 0;
    let duplicated = 0;
    for (let i = 0; i < jobs; i++) {
      const n = seen.get(i) ?? 0;
      if (n === 0) missing++;
      if (n > 1) duplicated++;
    }
    return { jobsPerSecond: jobs / seconds, missing, duplicated };
  } finally {
    for (const { child } of children) if (child.exitCode === null) child.kill('SIGKILL');
    await pool.end();
    await rm(dir, { recursive: true, force: true });
  }
}
