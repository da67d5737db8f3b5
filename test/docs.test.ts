// The documentation, checked as code: every link in README.md and docs/ leads somewhere, the HTTP
// API's route table is the app's routes with the scopes its access checks enforce, and every code
// example runs —
//   ts    each block is an excerpt of the file named in the `<!-- example: path -->` line above it,
//         files that tsc compiles with the project and tests run (examples/, test/fixtures/consumer/);
//   sql   each block runs in a migrated database (in a transaction, rolled back);
//   sh    each `curl` line runs against a `pgdrain start` process; each other command is one this
//         project has (an npm script, a `pgdrain` command, a file it runs).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isOperatorCommand } from '../src/cli/usage.ts';
import { createApp } from '../src/http/app.ts';
import { openApiDocument } from '../src/http/openapi.ts';
import { createDefaultRegistry } from '../src/jobs/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { OPEN_ROUTES, SCOPED_ROUTES } from './support/scope-matrix.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { type WorkerDevProcess, startWorkerDev } from './support/worker-dev-process.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PAGES = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const text = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

interface Block {
  page: string;
  line: number;
  lang: string;
  code: string;
  /** The `<!-- example: path -->` just above it, if any. */
  example?: string;
  /** Marked `<!-- copied by test/package.test.ts -->` or `<!-- run by test/….test.ts -->`: run as
   * written by that test (the README's quick start, copied into an empty folder; the statements that
   * move jobs from another queue, on that queue's own tables), so not checked here. */
  copied: boolean;
}

function blocks(page: string): Block[] {
  const lines = text(page).split('\n');
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((l, k) => k > i && l.startsWith('```'));
    const before = lines.slice(Math.max(0, i - 3), i).join('\n');
    out.push({
      page,
      line: i + 1,
      lang: open[1]!,
      code: lines.slice(i + 1, end).join('\n'),
      example: /<!-- example: (\S+) -->/.exec(before)?.[1],
      copied: before.includes('<!-- copied by test/package.test.ts -->') || /<!-- run by test\/\S+ -->/.test(before),
    });
    i = end;
  }
  return out;
}
const ALL = PAGES.flatMap(blocks).filter((b) => !b.copied);

/** A heading's anchor, as GitHub makes it. */
const slug = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[`*]/g, '')
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');

describe('links', () => {
  it('every relative link leads to a page that exists, and to a heading it has', () => {
    const broken: string[] = [];
    for (const page of PAGES) {
      for (const [, target] of text(page).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:)/.test(target!)) continue;
        const [file, anchor] = target!.split('#') as [string, string | undefined];
        const resolved = file === '' ? page : path.join(path.dirname(page), file);
        if (!existsSync(path.join(ROOT, resolved))) {
          broken.push(`${page}: ${target}`);
          continue;
        }
        if (anchor && resolved.endsWith('.md')) {
          const headings = text(resolved)
            .split('\n')
            .filter((l) => /^#+ /.test(l))
            .map((l) => slug(l.replace(/^#+ /, '')));
          if (!headings.includes(anchor)) broken.push(`${page}: ${target} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('the HTTP API page', () => {
  it("its route table is the app's routes, each with the scope it needs", async () => {
    const app = createApp({
      withDb: async () => undefined as never,
      registry: createDefaultRegistry({}),
      apiToken: 'docs-test-token-0123456789',
    });
    const document = (await openApiDocument(app, '')) as { paths: Record<string, Record<string, unknown>> };
    const served = Object.entries(document.paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p.replace(/\{(\w+)\}/g, ':$1')}`),
    );
    const scopeOf = (route: string) => {
      const [method, pattern] = route.split(' ') as [string, string];
      if (OPEN_ROUTES.includes(pattern)) return 'open';
      return SCOPED_ROUTES.find((r) => r.method === method && r.pattern === pattern)?.needs ?? '(none)';
    };
    const table = text('docs/http-api.md')
      .split('\n')
      .map((l) => /^\| (GET|POST|PUT|DELETE) \| `([^`]+)` \| (\w+) \|/.exec(l))
      .filter((m) => m !== null)
      .map((m) => `${m[1]} ${m[2]} ${m[3]}`);
    expect(table.sort()).toEqual(served.map((r) => `${r} ${scopeOf(r)}`).sort());
  });
});

describe('TypeScript examples', () => {
  const ts = ALL.filter((b) => b.lang === 'ts');
  it('every one names the file it is from, a file tsc compiles and a test runs', () => {
    const runnable = /^(examples\/|test\/fixtures\/consumer\/)/;
    expect(ts.filter((b) => !b.example || !runnable.test(b.example)).map((b) => `${b.page}:${b.line}`)).toEqual([]);
  });
  for (const block of ts.filter((b) => b.example)) {
    it(`${block.page}:${block.line} is an excerpt of ${block.example}`, () => {
      // Imports differ (the file imports from src/, the page from 'pgdrain'): tsc checks the file's.
      const squash = (s: string) =>
        s
          .split('\n')
          .map((l) => l.trim())
          .filter((l) => l && !/^import\b/.test(l) && !l.startsWith('// In your app:'))
          .join('\n');
      expect(squash(text(block.example!))).toContain(squash(block.code));
    });
  }
});

describe('SQL examples', () => {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
    await t.query('CREATE TABLE public.orders (id serial PRIMARY KEY, item text)');
  });
  afterAll(() => t?.close());
  for (const block of ALL.filter((b) => b.lang === 'sql')) {
    it(`${block.page}:${block.line} runs`, async () => {
      const client = await t.pool.connect();
      try {
        await client.query('BEGIN');
        // A job to name where an example needs one.
        await client.query(
          `INSERT INTO pgdrain.jobs (id, kind, payload) VALUES (42, 'send_receipt', '{}') ON CONFLICT DO NOTHING`,
        );
        await client.query(block.code.replace(/\$(\w+)/g, '42'));
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    });
  }
});

describe('shell examples', () => {
  const sh = ALL.filter((b) => b.lang === 'sh');
  const commands = sh.flatMap((b) =>
    b.code
      .replace(/\\\n\s*/g, ' ')
      .split('\n')
      .filter((l) => l.trim() && !l.trim().startsWith('#'))
      .map((line) => ({ block: b, line: line.replace(/\s+#.*$/, '').trim() })),
  );

  it('every command that is not a curl is one this project has', () => {
    const scripts = Object.keys((JSON.parse(text('package.json')) as { scripts: Record<string, string> }).scripts);
    const cli = text('src/entry/cli.ts') + text('src/cli/usage.ts');
    const unknown: string[] = [];
    for (const { block, line } of commands.filter((c) => !/\bcurl\b/.test(c.line) && !/^(AUTH|JSON)=/.test(c.line))) {
      // `JOB=$(npx pgdrain enqueue …)`: the command inside; `A=1 B=2 command`: the command.
      const parts = line.split(/&&|;/).map((p) =>
        p
          .trim()
          .replace(/^[A-Z_]+=\$\((.*)\)$/, '$1')
          .replace(/^([A-Z_]+=('[^']*'|\S+)\s+)+/, ''),
      );
      for (const part of parts) {
        const words = part.split(/\s+/);
        const [program, sub] = words;
        const known =
          (program === 'npm' &&
            (['install', 'ci', 'pack'].includes(sub!) ||
              (sub === 'run' ? scripts.includes(words[2]!) : scripts.includes(sub!)))) ||
          ((program === 'npx' || program === 'node_modules/.bin/pgdrain') &&
            (words.includes('pgdrain')
              ? cli.includes(`'${words[words.indexOf('pgdrain') + 1]}'`) ||
                cli.includes(`case '${words[words.indexOf('pgdrain') + 1]}'`) ||
                isOperatorCommand(words[words.indexOf('pgdrain') + 1])
              : words[1] === 'wrangler')) ||
          ((program === 'wrangler' || program === 'bash' || program === 'node') &&
            (program === 'wrangler' || existsSync(path.join(ROOT, sub!))));
        if (!known) unknown.push(`${block.page}:${block.line}: ${part}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  describe('curl, against a pgdrain start process (and the Worker under npm run dev:worker for its page)', () => {
    let t: TestDatabase;
    let sidecar: SidecarProcess;
    let worker: WorkerDevProcess;
    const TOKEN = 'docs-test-token-0123456789';
    beforeAll(async () => {
      t = await createTestDatabase();
      sidecar = await startSidecarProcess({
        DATABASE_URL: t.url,
        API_TOKEN: TOKEN,
        WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com',
      });
      worker = await startWorkerDev({ databaseUrl: t.url, hyperdrive: false, env: { API_TOKEN: TOKEN } });
    }, 90_000);
    afterAll(async () => {
      sidecar?.kill();
      await sidecar?.exited;
      await worker?.stop();
      await t?.close();
    });
    const curls = commands.filter((c) => /\bcurl\b/.test(c.line));
    it('there are some', () => expect(curls.length).toBeGreaterThan(10));
    for (const { block, line } of curls) {
      it(`${block.page}:${block.line}: ${line.slice(0, 70)}`, () => {
        // Every example's job ids exist (1, 7) and the token is where the README says.
        const command = line
          .replace(/\$\(cat \.pgdrain\/api-token\)/g, '$API_TOKEN')
          .replace(/http:\/\/127\.0\.0\.1:8080/g, '$URL')
          .replace(/http:\/\/127\.0\.0\.1:8787/g, worker.url)
          .replace(/<nextCursor>/g, '1');
        const env = {
          PATH: process.env.PATH ?? '',
          URL: sidecar.url,
          API_TOKEN: TOKEN,
          AUTH: `Authorization: Bearer ${TOKEN}`,
          JSON: 'Content-Type: application/json',
        };
        const run = spawnSync(
          'bash',
          ['-c', `${command.replace(/\bcurl\b/, 'curl -s -o /dev/null -w "%{http_code}"')}`],
          { env, encoding: 'utf8' },
        );
        expect(run.status, run.stderr).toBe(0);
        // Answered, and not with a server error.
        expect(Number(run.stdout)).toBeGreaterThanOrEqual(200);
        expect(Number(run.stdout)).toBeLessThan(500);
      });
    }
  });
});

describe('names', () => {
  it('every UPPER_CASE name the docs give in backticks is a setting, an export of the package, or a name of PostgreSQL, HTTP, Node or Cloudflare', async () => {
    const { SETTINGS } = await import('../src/settings.ts');
    const settings = new Set<string>(Object.values(SETTINGS).map((s) => s.env));
    const exported = new Set<string>();
    for (const entry of ['index', 'sidecar', 'worker', 'hono', 'testing', 'sql', 'client'])
      for (const name of Object.keys(await import(`../src/entry/${entry}.ts`))) exported.add(name);
    // Words of SQL, privileges, HTTP methods; other programs' variables; Cloudflare's names.
    const theirs = new Set(
      [
        'LISTEN NOTIFY ANALYZE VACUUM CONCURRENTLY DELETE UPDATE INSERT SELECT SET TRUNCATE EXPLAIN COMMIT BEGIN',
        'MAINTAIN OPTIONS',
        'PGSSLMODE PGSSLROOTCERT NODE_OPTIONS CHROMIUM_PATH ERR_UNKNOWN_FILE_EXTENSION',
        'HYPERDRIVE PGDRAIN_CLOCK CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE',
      ]
        .join(' ')
        .split(' '),
    );
    const unknown: string[] = [];
    for (const page of PAGES)
      for (const [, name] of text(page).matchAll(/`([A-Z][A-Z0-9_]{2,})`/g))
        if (!settings.has(name!) && !exported.has(name!) && !theirs.has(name!)) unknown.push(`${page}: ${name}`);
    expect([...new Set(unknown)]).toEqual([]);
  });
});

describe('option names', () => {
  it("every camelCase name the docs give in backticks is one pgdrain's code or examples have, or one of the queues the docs compare it with", () => {
    // A renamed option, field or function left in the docs is a name nothing declares any more.
    const files = (dir: string, ends: RegExp) =>
      readdirSync(path.join(ROOT, dir), { recursive: true, encoding: 'utf8' })
        .filter((f) => ends.test(f) && !f.includes('generated'))
        .map((f) => path.join(dir, f));
    const sources = [
      ...files('src', /\.(ts|sql)$/),
      ...files('examples', /\.ts$/),
      // The peers docs/coming-from.md, docs/workflows.md and docs/flow-control.md compare it with, as installed.
      ...files('node_modules/graphile-worker/dist', /\.d\.ts$/),
      ...files('node_modules/pg-boss/dist', /\.d\.ts$/),
      ...files('node_modules/@dbos-inc/dbos-sdk/dist/src', /\.d\.ts$/),
    ];
    const declared = new Set(sources.flatMap((file) => text(file).match(/\b[A-Za-z_]\w*\b/g) ?? []));
    const unknown: string[] = [];
    for (const page of PAGES) {
      const prose = text(page).replace(/```[\s\S]*?```/g, '');
      for (const [, code] of prose.matchAll(/`([^`\n]+)`/g))
        for (const [, name] of code!.matchAll(/(?<![\w.-])([a-z]+[A-Z][A-Za-z0-9]*)(?![\w-])/g))
          if (!declared.has(name!)) unknown.push(`${page}: ${name}`);
    }
    expect(unknown).toEqual([]);
  });
});

describe('error codes', () => {
  it("the HTTP API's error table lists every code the API answers, and no code it does not", () => {
    const table = text('docs/http-api.md')
      .split('\n')
      .filter((line) => /^\| [1-5]\d\d \|/.test(line))
      .flatMap((line) => [...line.split('|')[2]!.matchAll(/`([a-z_]+)`/g)].map(([, code]) => code!));
    const source = ['src/http', 'src/http/routes', 'src/db', 'src/jobs']
      .flatMap((dir) =>
        readdirSync(path.join(ROOT, dir))
          .filter((f) => f.endsWith('.ts'))
          .map((f) => text(`${dir}/${f}`)),
      )
      .join('\n');
    // What the routes throw, and the codes answered for the database's failures and refusals.
    const thrown = new Set(
      [...source.matchAll(/ApiError\(\s*\d+,\s*'([a-z_]+)'/g), ...source.matchAll(/\bcode: '([a-z_]+)'/g)].map(
        ([, code]) => code!,
      ),
    );
    thrown.delete('workflow_changed'); // a held run's `held.code`, not an error answer
    thrown.delete('custom'); // zod's issue code, in the kinds' schemas
    expect([...thrown].filter((code) => !table.includes(code)).sort()).toEqual([]);
    expect(table.filter((code) => !source.includes(`'${code}'`)).sort()).toEqual([]);
  });
});
