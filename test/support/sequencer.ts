// The order the test files start in: the longest first, by their measured time
// (test/support/file-durations.json, seconds on this machine's CI), so that the run ends with short
// files on every worker instead of one long file started last. Vitest orders by its own cache of
// durations, which a clean clone (CI) does not have: then by file size, and a short file that runs
// a long harness (test/chaos.test.ts) went last and made the run 50 s longer. Files the table does
// not know go first (a new file may be long). Refresh the table after a run that wrote a report:
// `node scripts/file-durations.mjs .tmp/vitest.json`.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const DURATIONS: Record<string, number> = JSON.parse(
  readFileSync(new URL('./file-durations.json', import.meta.url), 'utf8'),
);
const ROOT = path.resolve(new URL('../..', import.meta.url).pathname);

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const seconds = (spec: TestSpecification) =>
      DURATIONS[path.relative(ROOT, spec.moduleId).split(path.sep).join('/')] ?? Number.POSITIVE_INFINITY;
    // The base order first (projects apart, isolated files first); then, within a project, by the table.
    const base = await super.sort(files);
    const at = new Map(base.map((spec, i) => [spec, i]));
    return base.sort(
      (a, b) => (a.project.name === b.project.name ? seconds(b) - seconds(a) : 0) || at.get(a)! - at.get(b)!,
    );
  }
}
