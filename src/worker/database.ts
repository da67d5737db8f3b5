// The Worker's connection to PostgreSQL, opened per request or cron invocation (a socket belongs to
// the invocation that opened it, so nothing here lives at module scope). Two paths run the same
// Drizzle queries:
// - Hyperdrive (env.HYPERDRIVE): node-postgres over Cloudflare's TCP sockets to any PostgreSQL
//   (Supabase, RDS, Cloud SQL, your own). Hyperdrive pools in transaction mode, so nothing here
//   relies on session state or LISTEN; its query cache must be off for the queue's reads to be
//   current (see README "Deploying with Hyperdrive").
// - Neon (env.DATABASE_URL): Neon's serverless driver over a WebSocket.
// An invocation may have 6 connections open at once (sockets and fetches alike), so each path holds
// at most DRAIN_CONNECTIONS: the drain's statements, and a second claim in flight while the first
// is on its way (the round trip, not PostgreSQL, limits a Worker far from its database); the second
// opens only when a statement is sent while another is out. Transactional handlers get connections
// of their own from a second pool, opened only when one runs, of at most TRANSACTION_CONNECTIONS
// (the cron's housekeeping borrows one of them beside its drain, and gives it back when done).
// Together they leave a connection for handlers' fetches even when every pool is full (a
// transactional handler that fetches would otherwise wait for a slot nobody frees).
import { Pool as NeonPool, type PoolClient as NeonPoolClient, neonConfig } from '@neondatabase/serverless';
import { drizzle as drizzleNeon } from 'drizzle-orm/neon-serverless';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { safeErrorMessage } from '../db/url.ts';
import { type QueueDatabase, guardPool } from '../db/connections.ts';
import type { Db } from '../queries/index.ts';

/** The part of a Hyperdrive binding the Worker uses. */
export interface HyperdriveBinding {
  connectionString: string;
}

export interface DatabaseEnv {
  /** Hyperdrive binding: when present, the Worker reaches PostgreSQL through it with node-postgres. */
  HYPERDRIVE?: HyperdriveBinding;
  /** Secret: the Neon connection string, used when there is no Hyperdrive binding. */
  DATABASE_URL?: string;
  /** Local development and tests only: host:port of src/dev/ws-proxy.ts in front of a plain PostgreSQL. */
  NEON_WS_PROXY?: string;
}

export type WorkerDriver = 'hyperdrive' | 'neon';

/** The Worker's QueueDatabase, and which path it takes; its drain statements are `db`'s. */
export interface WorkerDatabase extends QueueDatabase {
  driver: WorkerDriver;
}

/** The drain's own connections: its statements, and a second claim while the first is in flight. */
export const DRAIN_CONNECTIONS = 2;
/** Transactional handlers of one invocation hold at most this many connections. */
export const TRANSACTION_CONNECTIONS = 3;

export function openWorkerDatabase(env: DatabaseEnv): WorkerDatabase {
  return env.HYPERDRIVE ? openHyperdrive(env.HYPERDRIVE) : openNeon(env);
}

function openHyperdrive(binding: HyperdriveBinding): WorkerDatabase {
  const open = (max: number) => {
    const pool = guardPool(new pg.Pool({ connectionString: binding.connectionString, max }));
    return { pool, db: drizzlePg({ client: pool }) as unknown as Db, end: quietEnd(pool, 'hyperdrive') };
  };
  const wrap = (client: pg.PoolClient) => drizzlePg({ client }) as unknown as Db;
  return withTransactionPool(open(DRAIN_CONNECTIONS), 'hyperdrive', () => open(TRANSACTION_CONNECTIONS), wrap);
}

function openNeon(env: DatabaseEnv): WorkerDatabase {
  if (!env.DATABASE_URL) {
    throw new Error(
      'no database: bind Hyperdrive as HYPERDRIVE, or `wrangler secret put DATABASE_URL` with your Neon connection ' +
        'string',
    );
  }
  if (env.NEON_WS_PROXY) useLocalProxy(env.NEON_WS_PROXY);
  const url = env.DATABASE_URL;
  const open = (max: number) => {
    const pool = guardPool(new NeonPool({ connectionString: url, max }));
    return { pool, db: drizzleNeon({ client: pool }) as unknown as Db, end: quietEnd(pool, 'neon') };
  };
  const wrap = (client: NeonPoolClient) => drizzleNeon({ client }) as unknown as Db;
  return withTransactionPool(open(DRAIN_CONNECTIONS), 'neon', () => open(TRANSACTION_CONNECTIONS), wrap);
}

interface OpenedPool<Client> {
  pool: { connect(): Promise<Client> };
  db: Db;
  end(): Promise<void>;
}

/** The main connection, and the transactional handlers' pool opened on first use; end() closes both. */
function withTransactionPool<Client extends { release(destroy?: boolean): void }>(
  main: OpenedPool<Client>,
  driver: WorkerDriver,
  openTransactionPool: () => OpenedPool<Client>,
  wrap: (client: Client) => Db,
): WorkerDatabase {
  let transactionPool: OpenedPool<Client> | undefined;
  return {
    db: main.db,
    drainDb: main.db,
    driver,
    transactions: async () => {
      transactionPool ??= openTransactionPool();
      const client = await transactionPool.pool.connect();
      return { db: wrap(client), giveBack: (destroy) => client.release(destroy) };
    },
    close: async () => {
      await Promise.all([main.end(), transactionPool?.end()]);
    },
  };
}

/**
 * A pool's error listener and an end() that never rejects. The listener is mandatory on both paths:
 * closing makes the driver report the socket it just closed (Neon: "Network connection lost";
 * pg-cloudflare: "This socket has been closed"), which without a listener is an uncaught error.
 * Those are expected after end(), and from a connection the pool closed itself (it closes the one
 * a statement failed on: that statement's own error is its caller's to report); anything else is
 * logged, without the connection string.
 */
function quietEnd(
  pool: { on(event: 'error', fn: (error: Error, client?: unknown) => void): unknown; end(): Promise<void> },
  driver: WorkerDriver,
) {
  let ending = false;
  pool.on('error', (error, client) => {
    // Both drivers' clients (pg's, and Neon's fork of it) mark themselves ending in end().
    if (ending || (client as { _ending?: boolean } | undefined)?._ending) return;
    console.error(JSON.stringify({ event: 'pool_error', driver, error: safeErrorMessage(error) }));
  });
  return async () => {
    ending = true;
    await pool.end().catch(() => {});
  };
}

/** Plain ws:// to a local proxy (src/dev/ws-proxy.ts); production connects to Neon as Neon
 * documents. The connect is pipelined as against Neon: the local proxy, like Neon's, takes the
 * password in cleartext and authenticates to PostgreSQL itself. */
export function useLocalProxy(proxy: string): void {
  neonConfig.wsProxy = (host, port) => `${proxy}/v1?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = 'password';
}
