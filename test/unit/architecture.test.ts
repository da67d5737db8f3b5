// What keeps src/ readable, checked on every run: no function longer than 80 lines, no module
// circle (a module that imports, through others, itself — type imports included), and a drain that
// knows nothing of workflows (it sees a generic outcome, "settled by its own statement"), and two
// runtime shells around one core (src/runtime/core.ts); parsed
// with oxc-parser.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseSync } from 'oxc-parser';
import { expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const MAX_FUNCTION_LINES = 80;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const full = path.join(dir, entry);
    return statSync(full).isDirectory() ? sourceFiles(full) : full.endsWith('.ts') ? [full] : [];
  });
}

const modules = sourceFiles(SRC).map((file) => {
  const text = readFileSync(file, 'utf8');
  return { file, text, program: parseSync(file, text).program as unknown as Node };
});

interface Node {
  type?: string;
  start: number;
  end: number;
  source?: { value: string };
  [key: string]: unknown;
}

function* nodes(node: unknown): Generator<Node> {
  if (!node || typeof node !== 'object') return;
  if (Array.isArray(node)) {
    for (const child of node) yield* nodes(child);
    return;
  }
  if (typeof (node as Node).type === 'string') yield node as Node;
  for (const value of Object.values(node)) if (value && typeof value === 'object') yield* nodes(value);
}

it(`no function in src/ is longer than ${MAX_FUNCTION_LINES} lines`, () => {
  const long: string[] = [];
  for (const { file, text, program } of modules) {
    const lineOf = (offset: number) => text.slice(0, offset).split('\n').length;
    for (const n of nodes(program)) {
      if (!['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression'].includes(n.type!)) continue;
      const lines = lineOf(n.end) - lineOf(n.start) + 1;
      if (lines > MAX_FUNCTION_LINES) long.push(`${path.relative(SRC, file)}:${lineOf(n.start)} (${lines} lines)`);
    }
  }
  expect(long).toEqual([]);
});

it('no module circle in src/', () => {
  const imports = new Map<string, string[]>();
  for (const { file, program } of modules) {
    const body = (program as unknown as { body: Node[] }).body;
    const deps = body
      .filter(
        (s) =>
          ['ImportDeclaration', 'ExportNamedDeclaration', 'ExportAllDeclaration'].includes(s.type!) &&
          s.source?.value.startsWith('.'),
      )
      .map((s) => path.resolve(path.dirname(file), s.source!.value));
    imports.set(file, deps);
  }
  const circles = new Set<string>();
  const onPath: string[] = [];
  const finished = new Set<string>();
  const visit = (file: string) => {
    onPath.push(file);
    for (const dep of imports.get(file) ?? []) {
      if (!imports.has(dep)) continue;
      const at = onPath.indexOf(dep);
      if (at >= 0) circles.add([...onPath.slice(at), dep].map((f) => path.relative(SRC, f)).join(' -> '));
      else if (!finished.has(dep)) visit(dep);
    }
    onPath.pop();
    finished.add(file);
  };
  for (const file of imports.keys()) if (!finished.has(file)) visit(file);
  expect([...circles]).toEqual([]);
});

it('the drain knows nothing of workflows: no import from src/workflows, no word of workflows or parks in src/drain', () => {
  const drainModules = modules.filter(({ file }) => path.relative(SRC, file).startsWith(`drain${path.sep}`));
  expect(drainModules.length).toBeGreaterThan(5);
  const found: string[] = [];
  for (const { file, text, program } of drainModules) {
    const body = (program as unknown as { body: Node[] }).body;
    for (const s of body) {
      const from = s.source?.value;
      if (from && path.resolve(path.dirname(file), from).startsWith(path.join(SRC, 'workflows')))
        found.push(`${path.relative(SRC, file)} imports ${from}`);
    }
    text.split('\n').forEach((line, i) => {
      if (/workflow|park/i.test(line)) found.push(`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`);
    });
  }
  expect(found).toEqual([]);
});

it('both runtimes wrap one core: neither shell builds its registry, drain options or housekeeping round itself', () => {
  const shells = modules.filter(({ file }) =>
    ['worker', 'sidecar'].some((dir) => path.relative(SRC, file).startsWith(`${dir}${path.sep}`)),
  );
  expect(shells.length).toBeGreaterThan(5);
  // What src/runtime/core.ts writes once; a shell that needs one of these asks the core.
  const coreOnly = /\b(checkSchedules|housekeepAndSchedule|DRAIN_PROFILES)\b|housekeeping\.ts'/;
  const found: string[] = [];
  for (const { file, text } of shells)
    text.split('\n').forEach((line, i) => {
      if (coreOnly.test(line) && !line.trim().startsWith('//'))
        found.push(`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`);
    });
  expect(found).toEqual([]);
  for (const shell of ['worker/create-worker.ts', 'sidecar/index.ts']) {
    const text = modules.find(({ file }) => path.relative(SRC, file) === shell.replace('/', path.sep))!.text;
    expect(text, shell).toMatch(/from '\.\.\/runtime\/core\.ts'/);
  }
});

it('no line in src/ is longer than 120 characters (the formatter wraps code; this holds SQL, text and comments too)', () => {
  const long = modules.flatMap(({ file, text }) =>
    file.endsWith('.generated.ts')
      ? []
      : text.split('\n').flatMap((line, i) => ([...line].length > 120 ? [`${path.relative(SRC, file)}:${i + 1}`] : [])),
  );
  expect(long).toEqual([]);
});

it("every SQL function's live text is one file of src/sql/functions, and no migration defines one", () => {
  const drizzle = fileURLToPath(new URL('../../drizzle', import.meta.url));
  const inMigrations = readdirSync(drizzle)
    .filter((f) => f.endsWith('.sql'))
    .flatMap((f) =>
      readFileSync(path.join(drizzle, f), 'utf8')
        .split('\n')
        .filter((line) => /^\s*(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?FUNCTION\b/i.test(line))
        .map((line) => `${f}: ${line.trim()}`),
    );
  expect(inMigrations).toEqual([]);
  const folder = path.join(SRC, 'sql', 'functions');
  for (const file of readdirSync(folder)) {
    const defined = [...readFileSync(path.join(folder, file), 'utf8').matchAll(/CREATE OR REPLACE FUNCTION (\S+?)\(/g)];
    expect([file, defined.map((m) => m[1])]).toEqual([file, [`pgdrain.${file.replace(/\.sql$/, '')}`]]);
  }
});
