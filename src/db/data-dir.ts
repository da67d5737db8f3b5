// The local data folder of `npm start` and `npm run dev:worker`: the embedded server's files and
// the secrets generated for it (database password, API token), kept across restarts. Node only.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';

export async function ensureDataDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  // As root the embedded server runs as `postgres`, which must be able to enter this folder.
  if (process.getuid?.() === 0) await chmod(dir, 0o755);
}

/** A random secret kept in a file only its owner can read, the same across restarts. */
export async function readOrCreateSecret(file: string): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  const secret = randomBytes(24).toString('base64url');
  await writeFile(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  return secret;
}
