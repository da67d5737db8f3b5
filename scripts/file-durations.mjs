// Writes test/support/file-durations.json (what test/support/sequencer.ts orders the test files by)
// from a vitest JSON report: each file's seconds (a file the table lacks is taken for a long one).
// Usage: node scripts/file-durations.mjs .tmp/vitest.json
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const report = JSON.parse(readFileSync(process.argv[2] ?? '.tmp/vitest.json', 'utf8'));
const seconds = report.testResults
  // Paths from the repository's root, whichever clone wrote the report.
  .map((t) => [t.name.slice(t.name.lastIndexOf('/test/') + 1), Math.round((t.endTime - t.startTime) / 100) / 10])
  .sort((a, b) => b[1] - a[1]);
writeFileSync(
  path.join(root, 'test/support/file-durations.json'),
  `${JSON.stringify(Object.fromEntries(seconds), null, 2)}\n`,
);
console.log(`test/support/file-durations.json: ${seconds.length} files`);
