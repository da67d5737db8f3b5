// The sidecar's database: the one DATABASE_URL names, or an embedded PostgreSQL 18 with its data in
// the data folder; migrated before anything else runs. Also the API token, generated and kept in
// the data folder when none is set.
import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { Logger } from 'pino';
import { EMBEDDED_URL_FILE, ensureDataDir, readOrCreateSecret, writePrivateFile } from '../db/data-dir.ts';
import { startEmbeddedPostgres } from '../db/embedded.ts';
import { describeHolder, migrateDatabase } from '../db/migrate.ts';
import { libpqUrl, redactUrl, safeErrorMessage } from '../db/url.ts';
import { type QueueDatabase, guardPool } from '../db/connections.ts';
import { DRAIN_STARTUP_OPTIONS } from '../db/pooler.ts';
import type { Db } from '../queries/index.ts';
import type { Incidents } from './incidents.ts';

export interface SidecarDatabase {
  /** With its password: never log it. */
  url: string;
  stop(): Promise<void>;
}

/** DATABASE_URL, or an embedded server in `dataDir`; migrations applied either way. */
export async function openDatabase(
  options: {
    databaseUrl?: string;
    dataDir: string;
    embeddedSettings?: Record<string, string | number>;
    /** The embedded server's port (EMBEDDED_PORT); default a free one. */
    embeddedPort?: number;
    signal?: AbortSignal;
  },
  log: Logger,
): Promise<SidecarDatabase> {
  // TLS as libpq means it (sslmode, sslrootcert, PGSSLMODE, PGSSLROOTCERT) on every connection.
  let url = options.databaseUrl === undefined ? undefined : libpqUrl(options.databaseUrl);
  let stop = async () => {};
  if (!url) {
    await ensureDataDir(options.dataDir);
    const embedded = await startEmbeddedPostgres({
      dataDir: path.join(options.dataDir, 'postgres'),
      password: await readOrCreateSecret(path.join(options.dataDir, 'postgres-password')),
      settings: options.embeddedSettings,
      ...(options.embeddedPort ? { port: options.embeddedPort } : {}),
      onLog: (line) => log.debug({ postgres: line.trim() }, 'embedded PostgreSQL'),
    });
    url = embedded.url;
    // For the `pgdrain` command in this folder (pgdrain stats, jobs …): it connects here unasked.
    const urlFile = path.join(options.dataDir, EMBEDDED_URL_FILE);
    await writePrivateFile(urlFile, `${url}\n`);
    stop = () => embedded.stop();
    log.info(
      { database: redactUrl(url), dataDir: options.dataDir, urlFile },
      'embedded PostgreSQL started; the pgdrain command in this folder uses it (its URL is in urlFile)',
    );
  }
  try {
    await migrateDatabase(url, {
      onLockBusy: (migration, tries) =>
        log.warn({ migration, tries }, 'a migration waits for a table another transaction holds; trying again'),
      onWaiting: (holder) =>
        log.info(
          { holder: holder.applicationName, holderPid: holder.pid, since: holder.since?.toISOString() },
          `another process is migrating the database (${describeHolder(holder)}); waiting for it to finish`,
        ),
      signal: options.signal,
    });
  } catch (error) {
    await stop();
    if (options.signal?.aborted) throw options.signal.reason;
    throw new Error(`migrations failed on ${redactUrl(url)}: ${safeErrorMessage(error)}`);
  }
  return { url, stop };
}

/** The API token: the one given, or one generated once and kept in the data folder. */
export async function resolveApiToken(
  given: string | undefined,
  dataDir: string,
  log: Logger,
): Promise<{ token: string; generatedIn: string | null }> {
  if (given) return { token: given, generatedIn: null };
  await ensureDataDir(dataDir);
  const file = path.join(dataDir, 'api-token');
  const existed = existsSync(file);
  const token = await readOrCreateSecret(file);
  log.info(
    { tokenFile: file },
    existed
      ? 'API token read from the data folder'
      : 'API token generated and saved in its file, readable by its owner only',
  );
  return { token, generatedIn: existed ? null : file };
}

/**
 * The drainer's own connections commit asynchronously: a claim, completion or failure lost in a
 * server crash only means that job runs again (delivery is at-least-once anyway), while waiting for
 * the WAL flush on every batch costs a large share of drain throughput. Everything that enqueues —
 * the API, recurring schedules, your own transactions — uses the other pool and stays durable.
 */
export function openPools(
  url: string,
  poolSize: number,
  incidents: Incidents,
  { startupOptions = true }: { startupOptions?: boolean } = {},
): QueueDatabase {
  const pool = guardPool(new pg.Pool({ connectionString: url, max: poolSize, application_name: 'pgdrain' }));
  const drainPool = createDrainPool(url, { startupOptions });
  // Transactional handlers' own connections: durable commits (their writes are your data), as many
  // as the API's pool, opened only when such a handler runs. A handler given up mid-transaction has
  // its connection destroyed, so the server rolls back at once.
  const handlerPool = guardPool(
    new pg.Pool({ connectionString: url, max: poolSize, application_name: 'pgdrain-handlers' }),
  );
  const pools = [pool, drainPool, handlerPool];
  // An idle client lost (a server restart): the pool replaces it.
  for (const p of pools) p.on('error', (error) => incidents.start('pool', error));
  return {
    db: drizzle({ client: pool }) as unknown as Db,
    drainDb: drizzle({ client: drainPool }) as unknown as Db,
    transactions: async () => {
      const client = await handlerPool.connect();
      let endedWith: unknown;
      const heard = (error: unknown) => {
        endedWith ??= error;
      };
      client.on('error', heard);
      return {
        db: drizzle({ client }) as unknown as Db,
        endedWith: () => endedWith,
        giveBack: (destroy) => {
          client.off('error', heard);
          client.release(destroy);
        },
      };
    },
    close: async () => {
      await Promise.all(pools.map((p) => p.end().catch(() => {})));
    },
  };
}

/** The drainer's pool: asynchronous commit for the claims, settlements, renewals and the reaper.
 * Nothing else is set on its connections: planner settings belong to the one statement they are for
 * (pgdrain.claim()'s own SET clauses), never to a pool that other statements share. A pooler that
 * refuses startup parameters (db/pooler.ts) gets none: its commits are then synchronous. */
export function createDrainPool(url: string, { startupOptions = true }: { startupOptions?: boolean } = {}): pg.Pool {
  return guardPool(
    new pg.Pool({
      connectionString: url,
      max: 4,
      application_name: 'pgdrain-drain',
      ...(startupOptions ? { options: DRAIN_STARTUP_OPTIONS } : {}),
    }),
  );
}
