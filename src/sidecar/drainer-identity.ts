// The sidecar's identity across restarts: DRAINER_ID, else a name generated once and kept in the
// data folder (`drainer-id`). Every lock token of this process starts with `sidecar-<id>.`, and the
// process holds the identity for as long as it runs (queries/drainer-identity.ts: an advisory lock on
// a connection of its own). A process that takes the identity knows no live process of that name is
// left, so it releases at once the jobs an earlier process of the same name still held — a restart
// after kill -9 runs them within moments instead of after their leases (30 s) and a reap round.
// When a live process already holds the name (two processes given one DRAINER_ID, or sharing a data
// folder), this one runs under a fresh name and releases nothing: a live drainer is never robbed.
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { Logger } from 'pino';
import { DRAINER_ID_PATTERN } from '../db/constants.ts';
import { ensureDataDir } from '../db/data-dir.ts';
import { type Db, holdDrainerIdentity } from '../queries/index.ts';

export interface DrainerIdentity {
  drainerId: string;
  /** Starts every lock token of this process (`<workerId>:<n>`). */
  workerId: string;
  /** What an earlier process of this identity may still hold: lock tokens starting with `prefix`,
   * none of them ours (`except`). Null when this process could not take the identity. */
  earlierProcess: { prefix: string; except: string } | null;
  /** Gives the identity up (closes its connection). */
  stop(): Promise<void>;
}

export async function holdIdentity(
  url: string,
  options: { given?: string; dataDir: string },
  log: Logger,
): Promise<DrainerIdentity> {
  const wanted = options.given ?? (await storedDrainerId(options.dataDir));
  let session = await openSession(url);
  let held: boolean;
  try {
    held = await holdDrainerIdentity(drizzle({ client: session }) as unknown as Db, wanted);
  } catch (error) {
    await session.end().catch(() => {});
    throw error;
  }
  if (!held) {
    await session.end().catch(() => {});
    log.warn(
      { drainerId: wanted },
      'another live process holds this DRAINER_ID: this one runs under a fresh one and releases none of its jobs; ' +
        'give each process its own',
    );
  }
  const drainerId = held ? wanted : `${wanted}-${randomBytes(4).toString('hex')}`;
  const workerId = `sidecar-${drainerId}.${os.hostname()}.${process.pid}.${randomBytes(3).toString('hex')}`;
  // The lock lives as long as its session: one lost (a database restart) is taken again at once, so
  // that a process starting meanwhile under the same name cannot take it and release our jobs.
  let stopped = false;
  let retry: ReturnType<typeof setTimeout> | undefined;
  const watch = (client: pg.Client) => {
    client.on('error', () => {});
    client.once('end', () => {
      if (!stopped) retry = setTimeout(retake, 200);
    });
  };
  const retake = async () => {
    try {
      const next = await openSession(url);
      if (stopped) return void (await next.end().catch(() => {}));
      if (await holdDrainerIdentity(drizzle({ client: next }) as unknown as Db, drainerId)) {
        session = next;
        watch(next);
        log.info({ drainerId }, 'this drainer holds its identity again');
        return;
      }
      await next.end().catch(() => {});
      log.error(
        { drainerId },
        'another process took this DRAINER_ID while its connection was down: give each process its own name',
      );
    } catch {
      if (!stopped) retry = setTimeout(retake, 1_000);
    }
  };
  if (held) watch(session);
  return {
    drainerId,
    workerId,
    earlierProcess: held ? { prefix: `sidecar-${drainerId}.`, except: `${workerId}:` } : null,
    stop: async () => {
      stopped = true;
      clearTimeout(retry);
      if (held) await session.end().catch(() => {});
    },
  };
}

async function openSession(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'pgdrain-identity', keepAlive: true });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** The data folder's drainer id, generated on first use (two processes starting at once agree on one). */
async function storedDrainerId(dataDir: string): Promise<string> {
  await ensureDataDir(dataDir);
  const file = path.join(dataDir, 'drainer-id');
  let id: string;
  try {
    id = `d${randomBytes(8).toString('hex')}`;
    await writeFile(file, `${id}\n`, { mode: 0o644, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    id = (await readFile(file, 'utf8')).trim();
  }
  if (!DRAINER_ID_PATTERN.test(id))
    throw new Error(
      `${file} holds ${JSON.stringify(id.slice(0, 40))}, not a drainer id (1 to 100 letters, digits, - or _): ` +
        `delete it or set DRAINER_ID`,
    );
  return id;
}
