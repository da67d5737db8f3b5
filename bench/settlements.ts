// The settlements beside the plain drain's completion: what a failed attempt's statement costs (a
// retry with backoff, and a last attempt that makes the job dead), in µs of statement time per job,
// this tree against another in alternating pairs (each in a process and database of its own).
// Only the failing statement is timed: claims of 20, then one failMany() per claim, as a drain sends
// them; no handler runs.
//
//   npm run bench:settlements -- --against REV [--server stock] [--pairs N] [--jobs N]
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { checkout, median, startBenchServer } from './plain-drain.ts';

const BATCH = 20;

/** Statement µs per job of failMany() over `n` jobs, by the tree at `tree`, in `url` (migrated by it). */
async function failCost(tree: string, url: string, n: number, dead: boolean): Promise<number> {
  const load = (file: string) => import(pathToFileURL(path.join(tree, 'src', ...file.split('/'))).href);
  const { migrateDatabase } = await load('db/migrate.ts');
  const { claim, enqueueMany, failMany } = await load('queries/index.ts');
  const { drizzle } = await import('drizzle-orm/node-postgres');
  await migrateDatabase(url);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const db = drizzle({ client: pool });
  try {
    await pool.query('TRUNCATE pgdrain.jobs, pgdrain.job_counts');
    await enqueueMany(
      db,
      Array.from({ length: n }, (_, i) => ({ kind: 'settle', payload: { i }, maxAttempts: dead ? 1 : 3 })),
    );
    await pool.query('VACUUM ANALYZE pgdrain.jobs');
    let spent = 0;
    for (let round = 0; ; round++) {
      const jobs: { id: string; lockedBy: string }[] = await claim(db, {
        batchSize: BATCH,
        lockToken: `bench:${round}`,
        visibilityTimeoutSeconds: 60,
      });
      if (jobs.length === 0) break;
      const started = performance.now();
      await failMany(
        db,
        jobs.map((j) => ({ id: j.id, lockedBy: j.lockedBy, error: 'bench', backoff: { baseSeconds: 3600 } })),
      );
      spent += performance.now() - started;
    }
    return (spent * 1000) / n;
  } finally {
    await pool.end();
  }
}

function inProcess(tree: string, url: string, n: number, dead: boolean): Promise<number> {
  return new Promise((resolve, reject) => {
    const args = [fileURLToPath(import.meta.url), '--once', tree, url, String(n), dead ? 'dead' : 'retry'];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      const value = Number(out.trim().split('\n').at(-1));
      if (code === 0 && Number.isFinite(value)) resolve(value);
      else reject(new Error(`settlements of ${tree} exited ${code}: ${out}`));
    });
  });
}

async function main(args: string[]): Promise<void> {
  if (args[0] === '--once') {
    const [tree, url, n, how] = args.slice(1);
    await failCost(tree!, url!, 2_000, how === 'dead'); // warms the JIT and the plans
    console.log(await failCost(tree!, url!, Number(n), how === 'dead'));
    return;
  }
  const against = args[args.indexOf('--against') + 1];
  if (!args.includes('--against') || !against) throw new Error('bench:settlements needs --against REV');
  const pairs = args.includes('--pairs') ? Number(args[args.indexOf('--pairs') + 1]) : 6;
  const n = args.includes('--jobs') ? Number(args[args.indexOf('--jobs') + 1]) : 20_000;
  const server = await startBenchServer(args);
  const other = checkout(against);
  const trees = [
    { label: 'this tree', tree: path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..') },
    { label: against, tree: other.tree },
  ];
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    for (const how of ['retry', 'dead'] as const) {
      const values = trees.map(() => [] as number[]);
      for (let r = 0; r < pairs; r++) {
        const order = r % 2 === 0 ? [0, 1] : [1, 0];
        for (const i of order) {
          const name = `bench_settle_${i}`;
          await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
          await admin.query(`CREATE DATABASE ${name}`);
          const url = new URL(server.url);
          url.pathname = `/${name}`;
          values[i]!.push(await inProcess(trees[i]!.tree, url.toString(), n, how === 'dead'));
        }
      }
      const [mine, theirs] = values.map(median) as [number, number];
      console.log(
        `fail (${how}) ${n / 1000}k, statement µs per job, median of ${pairs}: this tree ${mine.toFixed(1)}, ` +
          `${against} ${theirs.toFixed(1)} (${(((mine - theirs) / theirs) * 100).toFixed(1)}%)`,
      );
    }
  } finally {
    for (const i of [0, 1]) await admin.query(`DROP DATABASE IF EXISTS bench_settle_${i} WITH (FORCE)`).catch(() => {});
    await admin.end();
    await server.stop();
    other.remove();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
