// The migrations folder of a shipped version, from this repository's history: what a database
// migrated by that version holds (its functions too — before wave 6 the migrations defined them).
// Upgrade tests start from these, never from today's folder cut short: today's migrations keep
// only schema changes, and a cut of them is a state no release ever left.
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';

/** The last commit of wave 5 (0.1.0 as the first wave-6 session found it): its drizzle/ defines
 * every function in the migrations. */
export const WAVE5 = '2faa868';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** drizzle/ as `commit` had it, in a temporary folder, cut before the migration whose tag starts
 * with `before` (when given); `remove()` deletes it. */
export async function shippedMigrations(
  commit: string,
  before?: string,
): Promise<{ folder: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-shipped-'));
  const remove = () => rm(dir, { recursive: true, force: true });
  try {
    const archive = execFileSync('git', ['-C', REPO, 'archive', '--format=tar', commit, 'drizzle'], {
      maxBuffer: 64 * 1024 * 1024,
    });
    execFileSync('tar', ['-x', '-C', dir], { input: archive });
  } catch (error) {
    await remove();
    throw new Error(
      `cannot read drizzle/ at ${commit} from git (upgrade tests need this repository's history): ${(error as Error).message}`,
    );
  }
  const folder = path.join(dir, 'drizzle');
  if (before !== undefined) {
    const journalFile = path.join(folder, 'meta', '_journal.json');
    const journal = JSON.parse(await readFile(journalFile, 'utf8')) as { entries: { tag: string }[] };
    journal.entries = journal.entries.filter((e) => e.tag < before);
    await writeFile(journalFile, JSON.stringify(journal));
  }
  return { folder, remove };
}

/** A new database migrated by the version at `commit`, up to (not including) the migration whose
 * tag starts with `before`: what that release left. */
export async function databaseShippedBy(commit: string, before?: string): Promise<TestDatabase> {
  const { folder, remove } = await shippedMigrations(commit, before);
  try {
    const db = await createTestDatabase({ migrate: false });
    await migrateDatabase(db.url, { folder }).catch(async (error) => {
      await db.close();
      throw error;
    });
    return db;
  } finally {
    await remove();
  }
}
