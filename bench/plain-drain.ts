// The plain drain: every change's budget. A job that uses none of pgdrain's features (a no-op
// kind, no limits, nothing kept, nothing traced, counts on) drained the same way every time, so
// that what a feature costs the jobs that do not use it shows up here.
//
//   npm run bench:plain                      this tree: 6 drains of 50k, median
//   npm run bench:plain -- --against REV     this tree and REV in alternating pairs (ABBA), each
//                                            in its own process and database on one server
//   npm run bench:plain -- --server stock    on Debian's PostgreSQL with its defaults (JIT on)
//                                            instead of the embedded 18 (DATABASE_URL: that server)
//
// A drain is: delete the last drain's jobs, VACUUM, bulk-enqueue n, ANALYZE, start the sidecar's
// drainer, time until every job has run exactly once. The VACUUM keeps the dead tuples of the
// previous drain out of the measurement: they decide how far each claim walks, so without it each
// drain measures the ones before it (the headline rows of `npm run bench` drain after the
// enqueue trials' deletions, and come out 10-15% below this one on this machine).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, symlinkSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';

export const PLAIN_DRAIN_JOBS = 50_000;

/** One plain drain of `n` jobs by the tree at `tree` (its own bench/systems.ts and schema), on a
 * database of its own at `url`, installed there on the first call. Returns jobs per second. */
export async function plainDrain(tree: string, url: string, n: number): Promise<number> {
  const { pgdrainSystem, RunCounter, now } = await import(pathToFileURL(path.join(tree, 'bench', 'systems.ts')).href);
  const system = pgdrainSystem();
  await system.install(url);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await system.reset();
    await admin.query(`VACUUM ${system.table}`);
    await system.enqueue(n);
    await admin.query(`ANALYZE ${system.table}`);
    const counter = new RunCounter(n);
    const t0 = now();
    await system.drain(counter);
    const seconds = (now() - t0) / 1000;
    const [missing, duplicated] = counter.check();
    if (missing || duplicated)
      throw new Error(`plain drain: ${missing} jobs never ran and ${duplicated} ran twice in a drain of ${n}`);
    return n / seconds;
  } finally {
    await admin.end();
    await system.close();
  }
}

const here = path.dirname(fileURLToPath(import.meta.url));
const thisTree = path.resolve(here, '..');

/** A checkout of `rev` to measure against, with dependencies: this tree's node_modules when the
 * lockfiles match, its own `npm ci` otherwise. */
export function checkout(rev: string): { tree: string; remove: () => void } {
  const sha = execFileSync('git', ['rev-parse', '--short', rev], { cwd: thisTree, encoding: 'utf8' }).trim();
  const tree = path.join(thisTree, '.tmp', `plain-${sha}`);
  if (!existsSync(tree))
    execFileSync('git', ['worktree', 'add', '--detach', tree, sha], { cwd: thisTree, stdio: 'ignore' });
  const sameLock =
    readFileSync(path.join(tree, 'package-lock.json'), 'utf8') ===
    readFileSync(path.join(thisTree, 'package-lock.json'), 'utf8');
  if (!existsSync(path.join(tree, 'node_modules'))) {
    if (sameLock) symlinkSync(path.join(thisTree, 'node_modules'), path.join(tree, 'node_modules'));
    else execFileSync('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: tree, stdio: 'inherit' });
  }
  if (existsSync(path.join(tree, 'scripts', 'build-dashboard.mjs')))
    execFileSync(process.execPath, ['scripts/build-dashboard.mjs'], { cwd: tree, stdio: 'ignore' });
  return {
    tree,
    remove: () => execFileSync('git', ['worktree', 'remove', '--force', tree], { cwd: thisTree, stdio: 'ignore' }),
  };
}

/** One drain in a process of its own, after an untimed drain of 5k that warms its JIT: each
 * measured drain starts from the same state whatever ran before it. */
export function plainDrainInProcess(tree: string, url: string, n: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--once', tree, url, String(n)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      const value = Number(out.trim().split('\n').at(-1));
      if (code === 0 && Number.isFinite(value)) resolve(value);
      else reject(new Error(`plain drain of ${tree} exited ${code}: ${out}`));
    });
  });
}

export const median = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const fmt = (v: number) => `${(v / 1000).toFixed(1)}k`;

/** The server a comparison runs on: DATABASE_URL, Debian's PostgreSQL (`--server stock`), or an
 * embedded 18 in a temporary folder. */
export async function startBenchServer(args: string[]): Promise<{ url: string; stop: () => Promise<void> }> {
  const stock = args.includes('--server') && args[args.indexOf('--server') + 1] === 'stock';
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, stop: async () => {} };
  if (stock)
    return (
      await import(pathToFileURL(path.join(thisTree, 'test', 'support', 'stock-postgres.ts')).href)
    ).startStockPostgres();
  const { startEmbeddedPostgres } = await import(pathToFileURL(path.join(thisTree, 'src', 'db', 'embedded.ts')).href);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-plain-'));
  await chmod(dir, 0o755);
  const server = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    password: 'bench',
    settings: { max_connections: 100 },
  });
  return {
    url: server.url,
    stop: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function main(args: string[]): Promise<void> {
  if (args[0] === '--once') {
    const [tree, url, n] = args.slice(1);
    await plainDrain(tree!, url!, 5_000);
    console.log(await plainDrain(tree!, url!, Number(n)));
    return;
  }
  const against = args.includes('--against') ? args[args.indexOf('--against') + 1] : undefined;
  const pairs = args.includes('--pairs') ? Number(args[args.indexOf('--pairs') + 1]) : 6;
  const n = args.includes('--jobs') ? Number(args[args.indexOf('--jobs') + 1]) : PLAIN_DRAIN_JOBS;
  const server = await startBenchServer(args);
  const other = against ? checkout(against) : null;
  const trees = [{ label: 'this tree', tree: thisTree }, ...(other ? [{ label: against!, tree: other.tree }] : [])];
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  const urls: string[] = [];
  try {
    for (const [i] of trees.entries()) {
      await admin.query(`DROP DATABASE IF EXISTS bench_plain_${i} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE bench_plain_${i}`);
      const u = new URL(server.url);
      u.pathname = `/bench_plain_${i}`;
      urls.push(u.toString());
    }
    const values = trees.map(() => [] as number[]);
    for (let r = 0; r < pairs; r++) {
      const order = r % 2 === 0 ? trees.map((_, i) => i) : trees.map((_, i) => i).reverse();
      for (const i of order) {
        values[i]!.push(await plainDrainInProcess(trees[i]!.tree, urls[i]!, n));
        console.log(`  ${trees[i]!.label.padEnd(12)} ${r + 1}/${pairs}: ${fmt(values[i]!.at(-1)!)} jobs/s`);
      }
    }
    const medians = values.map(median);
    console.log(
      `\nplain drain ${n / 1000}k, median of ${pairs}: ${trees.map((t, i) => `${t.label} ${fmt(medians[i]!)} jobs/s`).join(', ')}`,
    );
    if (other)
      console.log(
        `this tree against ${against}: ${(((medians[0]! - medians[1]!) / medians[1]!) * 100).toFixed(1)}% (a change more than 3% slower needs its reason in the commit)`,
      );
  } finally {
    for (const [i] of trees.entries())
      await admin.query(`DROP DATABASE IF EXISTS bench_plain_${i} WITH (FORCE)`).catch(() => {});
    await admin.end();
    await server.stop();
    other?.remove();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
