// The sidecar's identity across restarts: DRAINER_ID, else a name generated once and kept in the
// data folder (`drainer-id`). Every lock token of this process starts with `sidecar-<id>.`, and the
// process holds the identity for as long as it runs (queries/drainer-identity.ts: a lease row it
// renews, on a connection of its own). A process that takes the identity knows no live process of that name is
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
import {
  type Db,
  type DrainerLease,
  drainerIdentityHolder,
  releaseDrainerIdentity,
  renewDrainerIdentity,
  takeDrainerIdentity,
} from '../queries/index.ts';

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
  options: { given?: string; dataDir: string; ownSession: boolean },
  log: Logger,
): Promise<DrainerIdentity> {
  const wanted = options.given ?? (await storedDrainerId(options.dataDir));
  const workerIdFor = (drainerId: string) =>
    `sidecar-${drainerId}.${os.hostname()}.${process.pid}.${randomBytes(3).toString('hex')}`;
  const session = await openSession(url);
  const dbOf = (client: pg.Client) => drizzle({ client }) as unknown as Db;
  const lease = {
    drainerId: wanted,
    holder: workerIdFor(wanted),
    ownSession: options.ownSession,
    staleSeconds: STALE_SECONDS,
  };
  let held: boolean;
  try {
    held = await takeWhenFree(dbOf(session), lease, log);
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
    const drainerId = `${wanted}-${randomBytes(4).toString('hex')}`;
    return { drainerId, workerId: workerIdFor(drainerId), earlierProcess: null, stop: async () => {} };
  }
  const renewals = keepRenewing(url, session, lease, log);
  return {
    drainerId: wanted,
    workerId: lease.holder,
    earlierProcess: { prefix: `sidecar-${wanted}.`, except: `${lease.holder}:` },
    stop: renewals.stop,
  };
}

/** Renews the lease every RENEW_MS on a connection of its own (whose server session is the holder's,
 * when it has one); a connection lost is opened again and the row renewed on it, so that a process
 * starting meanwhile under the same name finds it held. `stop` gives the identity up. */
function keepRenewing(url: string, first: pg.Client, lease: DrainerLease, log: Logger): { stop(): Promise<void> } {
  const dbOf = (client: pg.Client) => drizzle({ client }) as unknown as Db;
  let session = first;
  let stopped = false;
  let lost = false;
  let takenAway = false;
  const watch = (client: pg.Client) =>
    client.once('end', () => {
      if (!stopped && client === session) lost = true;
    });
  const renew = async () => {
    try {
      if (lost) {
        session = await openSession(url);
        watch(session);
      }
      const renewed = await renewDrainerIdentity(dbOf(session), lease);
      if (!renewed && !takenAway) {
        takenAway = true;
        log.error(
          { drainerId: lease.drainerId },
          'another process took this DRAINER_ID while this one could not renew it: give each process its own name',
        );
      }
      if (renewed && lost) log.info({ drainerId: lease.drainerId }, 'this drainer holds its identity again');
      lost = false;
    } catch {
      // Down: tried again at the next renewal, on a new connection.
    }
  };
  watch(session);
  let renewing: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    renewing = renewing.then(renew);
  }, RENEW_MS);
  timer.unref?.();
  return {
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await renewing;
      // Given up: the next process of this name takes it at once.
      await releaseDrainerIdentity(dbOf(session), lease).catch(() => {});
      await session.end().catch(() => {});
    },
  };
}

/** How often the holder renews its row, and how long unrenewed before the row is free to take. */
const RENEW_MS = 2_000;
const STALE_SECONDS = 10;

/** Takes the identity, or learns that a live process holds it. A holder whose own session is still
 * there is alive (asked again for a moment: a killed one's backend takes a few milliseconds to
 * go). A holder without a session of its own (behind a transaction pooler) may be dead or alive:
 * this waits, at most STALE_SECONDS and a little, for it to renew (alive) or for the row to go stale. */
async function takeWhenFree(db: Db, lease: DrainerLease, log: Logger): Promise<boolean> {
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  for (let quick = 0; quick < 4; quick++) {
    if (await takeDrainerIdentity(db, lease)) return true;
    await pause(250);
  }
  const first = await drainerIdentityHolder(db, lease.drainerId);
  if (!first) return takeDrainerIdentity(db, lease);
  if (first.ownSession) return false;
  log.info(
    { drainerId: lease.drainerId, waitAtMostSeconds: STALE_SECONDS + 2 },
    'the process that holds this DRAINER_ID holds it through a pooler, which cannot say whether it is alive: ' +
      'waiting for it to renew its lease or to let it lapse',
  );
  const deadline = Date.now() + (STALE_SECONDS + 2) * 1_000;
  while (Date.now() < deadline) {
    await pause(1_000);
    if (await takeDrainerIdentity(db, lease)) return true;
    const now = await drainerIdentityHolder(db, lease.drainerId);
    if (now && now.holder === first.holder && now.renewedAt.getTime() > first.renewedAt.getTime()) return false;
  }
  return takeDrainerIdentity(db, lease);
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
