// `npm test`: the type-check beside the Node tests (unit and node projects) and the tests inside
// workerd (the workers project), as two vitest runs side by side. Vitest runs projects of different
// pools one after the other, so in one run the Worker's suites waited for every Node file to end
// (a minute and a half of the run on this machine's two cores). Each run's output is printed as it
// comes, its lines prefixed by the run they belong to; arguments after `--` go to both (a
// `--outputFile.json=FILE` report is written by each and merged into FILE). Exits non-zero when
// either run fails.
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => path.join(root, 'node_modules', '.bin', name);

// The type-check goes beside the tests (a few seconds of the run's wall time otherwise); its
// findings fail the run as a failed test does.
const typeCheck = new Promise((resolve) => {
  const child = spawn(bin('tsc'), ['-p', '.'], { cwd: root, stdio: 'inherit' });
  child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
});

const args = process.argv.slice(2);
const report = args.find((a) => a.startsWith('--outputFile.json='))?.slice('--outputFile.json='.length);
// The Worker's files one at a time beside the Node run's two (vitest.config.ts): three at once is
// what two cores take without the process tests' timings failing (four failed them in CI).
const runs = [
  { name: 'node', projects: ['unit', 'node'], extra: [] },
  { name: 'workers', projects: ['workers'], extra: ['--maxWorkers', '1'] },
];

const results = await Promise.all(
  runs.map(
    (run) =>
      new Promise((resolve) => {
        const own = args.map((a) => (report && a === `--outputFile.json=${report}` ? `${a}.${run.name}` : a));
        const projects = run.projects.flatMap((p) => ['--project', p]);
        const child = spawn(bin('vitest'), ['run', ...projects, ...run.extra, ...own], {
          cwd: root,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        const prefix = (stream, out) => {
          let rest = '';
          stream.on('data', (chunk) => {
            const lines = (rest + chunk).split('\n');
            rest = lines.pop();
            for (const line of lines) out.write(`[${run.name}] ${line}\n`);
          });
          stream.on('end', () => rest && out.write(`[${run.name}] ${rest}\n`));
        };
        prefix(child.stdout, process.stdout);
        prefix(child.stderr, process.stderr);
        child.on('exit', (code, signal) => resolve({ run, code: code ?? (signal ? 1 : 0) }));
      }),
  ),
);

if (report) {
  const parts = runs.map((run) => {
    const file = `${report}.${run.name}`;
    try {
      return JSON.parse(readFileSync(path.resolve(root, file), 'utf8'));
    } catch {
      return null;
    } finally {
      rmSync(path.resolve(root, file), { force: true });
    }
  });
  const merged = parts.filter(Boolean).reduce((into, part) => {
    for (const [key, value] of Object.entries(part))
      if (typeof value === 'number' && key.startsWith('num')) into[key] = (into[key] ?? 0) + value;
    into.testResults = [...(into.testResults ?? []), ...(part.testResults ?? [])];
    into.startTime = Math.min(into.startTime ?? Infinity, part.startTime ?? Infinity);
    into.success = (into.success ?? true) && part.success;
    return into;
  }, {});
  if (parts.some((p) => p === null)) merged.success = false;
  writeFileSync(path.resolve(root, report), JSON.stringify(merged));
}

const failed = results.filter((r) => r.code !== 0);
for (const r of failed) console.error(`npm test: the ${r.run.name} run exited ${r.code}`);
const typeCheckCode = await typeCheck;
if (typeCheckCode !== 0) console.error(`npm test: the type-check (tsc -p .) exited ${typeCheckCode}`);
process.exit(failed.length > 0 || typeCheckCode !== 0 ? 1 : 0);
