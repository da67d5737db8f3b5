// The `pgdrain` command's quicker loading of drizzle-orm (src/entry/drizzle-loading.ts): Node's
// resolver is asked once, not for every file, and drizzle works the same.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const FIXTURE = fileURLToPath(new URL('../fixtures/drizzle-loading-count.ts', import.meta.url));
const load = (...args: string[]) =>
  JSON.parse(execFileSync(process.execPath, [FIXTURE, ...args], { encoding: 'utf8' })) as {
    askedNode: number;
    formats: string[];
    query: unknown;
    driver: string;
  };

it("resolves the imports between drizzle-orm's own files without asking Node's resolver for each, with the same result", () => {
  const plain = load();
  const quicker = load('--quicker');
  // Hundreds of files: each was a package lookup in a 179 KB package.json.
  expect(plain.askedNode).toBeGreaterThan(100);
  expect(quicker.askedNode).toBe(1);
  expect(quicker.formats).toEqual(['module']);
  expect(quicker.formats).toEqual(plain.formats);
  expect(quicker.query).toEqual(plain.query);
  expect(quicker.driver).toBe('function');
});
