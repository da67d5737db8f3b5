// Which database the `pgdrain` command talks to: DATABASE_URL, else — in a folder where `npm start`
// (pgdrain start without DATABASE_URL) runs its embedded PostgreSQL — that server, whose URL the
// sidecar keeps in the data folder (PGDRAIN_DATA_DIR, ./.pgdrain). Said on stderr when it is the latter.
import path from 'node:path';
import { EMBEDDED_URL_FILE, readEmbeddedUrl } from '../db/data-dir.ts';

/** The URL to use, or null with nothing to use. */
export async function commandDatabaseUrl(
  env: NodeJS.ProcessEnv,
  say: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<string | null> {
  if (env.DATABASE_URL) return env.DATABASE_URL;
  const dataDir = env.PGDRAIN_DATA_DIR || '.pgdrain';
  const url = await readEmbeddedUrl(dataDir).catch(() => null);
  if (url)
    say(
      `pgdrain: DATABASE_URL is unset: using the embedded PostgreSQL of \`npm start\` in this folder ` +
        `(${path.join(dataDir, EMBEDDED_URL_FILE)})`,
    );
  return url;
}
