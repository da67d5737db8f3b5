// The local data folder of `npm start` and `npm run dev:worker`: the embedded server's files and
// the secrets generated for it (database password, API token), kept across restarts. Node only.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export async function ensureDataDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  // As root the embedded server runs as `postgres`, which must be able to enter this folder.
  if (process.getuid?.() === 0) await chmod(dir, 0o755);
}

/** The embedded server's connection string, with its password, in the data folder (only its owner
 * can read it): what the `pgdrain` command connects to when DATABASE_URL is unset. */
export const EMBEDDED_URL_FILE = 'database-url';

/** Writes `text` to `file`, readable by its owner only, replacing what was there. */
export async function writePrivateFile(file: string, text: string): Promise<void> {
  await writeFile(file, text, { mode: 0o600 });
  await chmod(file, 0o600);
}

/** The embedded server's URL that `npm start` left in `dataDir`, or null (none started there). */
export async function readEmbeddedUrl(dataDir: string): Promise<string | null> {
  const file = path.join(dataDir, EMBEDDED_URL_FILE);
  return existsSync(file) ? (await readFile(file, 'utf8')).trim() || null : null;
}

/** A random secret kept in a file only its owner can read, the same across restarts. */
export async function readOrCreateSecret(file: string): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  const secret = randomBytes(24).toString('base64url');
  await writeFile(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  return secret;
}
