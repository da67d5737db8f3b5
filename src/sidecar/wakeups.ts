// How the sidecar learns of work: NOTIFY on a LISTEN connection (milliseconds), with the drainer's
// poll as the safety net, or the poll alone.
//
//   POLL_ONLY=true ──────────────────────────────────────────────► poll only
//   a transaction pooler, no LISTEN_DATABASE_URL ────────────────► poll only (it drops NOTIFY)
//   otherwise: LISTEN on LISTEN_DATABASE_URL or DATABASE_URL ──► test NOTIFY heard? ── yes ► waking on NOTIFY
//                                                                                     └─ no ─► poll only
//
// The listener sends itself a NOTIFY through the queue's own pool each time it comes up: a line that
// hears nothing (a pooler that hides it, a proxy) is said in the log and given up, and the log never
// claims a wake-up path that does not work.
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Logger } from 'pino';
import type { PoolerMode } from '../db/pooler.ts';
import { libpqUrl } from '../db/url.ts';
import { drainOptionsFor } from '../runtime/core.ts';
import type { Settings } from '../settings.ts';
import type { DrainNotices } from '../drain/index.ts';
import { CANCEL_CHANNEL, type Db, FINISHED_CHANNEL, NOTIFY_CHANNEL, rowsOf } from '../queries/index.ts';
import type { FinishedJobsHub } from './finished-jobs.ts';
import { errorForLog } from './incidents.ts';
import { NotificationListener } from './listener.ts';

/** The channel the listener tests itself on; nothing else is sent on it. */
const CHECK_CHANNEL = 'pgdrain_listener_check';
/** How long the listener waits for its own test NOTIFY. */
const CHECK_WITHIN_MS = 3_000;

type WakeupPath = { listenUrl: string } | { pollOnly: string };

/** Where the sidecar listens, or why it only polls. */
function wakeupPath(settings: Settings, databaseUrl: string, pooler: PoolerMode): WakeupPath {
  if (settings.pollOnly) return { pollOnly: 'POLL_ONLY=true' };
  if (settings.listenDatabaseUrl) return { listenUrl: libpqUrl(settings.listenDatabaseUrl) };
  if (pooler === 'transaction')
    return { pollOnly: 'a transaction-mode pooler does not deliver NOTIFY (set LISTEN_DATABASE_URL to a direct URL)' };
  return { listenUrl: databaseUrl };
}

/** The wake-up line as a part of the sidecar: the listener, or nothing (the poll alone, said so). */
export function startWakeups(
  settings: Settings,
  databaseUrl: string,
  pooler: PoolerMode,
  to: { notices: DrainNotices; finishedJobs: FinishedJobsHub; db: Db },
  log: Logger,
): { stop(): Promise<void> | void } {
  const path = wakeupPath(settings, databaseUrl, pooler);
  if ('listenUrl' in path)
    return startListener(path.listenUrl, { ...to, kinds: drainOptionsFor(settings, 'sidecar').kinds, settings }, log);
  const pollIntervalMs = settings.pollIntervalMs;
  log.info({ pollIntervalMs }, `waking by polling only, every ${pollIntervalMs} ms: ${path.pollOnly}`);
  return { stop: () => {} };
}

/** The LISTEN connection as a part. A ready job of one of our kinds (or any, without KINDS) is
 * claimed at once, by the open drain or a new one; a cancelled running job is checked at once by
 * the drain holding it; a finished job answers whoever waits for it. */
function startListener(
  url: string,
  to: {
    kinds: readonly string[] | undefined;
    notices: DrainNotices;
    finishedJobs: FinishedJobsHub;
    /** The queue's pool, which sends the test NOTIFY. */
    db: Db;
    settings: { pollIntervalMs?: number };
  },
  log: Logger,
): { stop(): Promise<void> } {
  const pollIntervalMs = to.settings.pollIntervalMs;
  let check: { token: string; heard: () => void } | undefined;
  let givenUp = false;
  const listener = new NotificationListener({
    connectionString: url,
    channels: [NOTIFY_CHANNEL, CANCEL_CHANNEL, FINISHED_CHANNEL, CHECK_CHANNEL],
    onNotify: (channel, payload) => {
      if (channel === CHECK_CHANNEL) {
        if (payload === check?.token) check.heard();
      } else if (channel === FINISHED_CHANNEL) to.finishedJobs.announce(payload);
      else if (channel === CANCEL_CHANNEL) to.notices.cancelRequested(payload);
      else if (!to.kinds || to.kinds.includes(payload)) to.notices.ready(payload);
    },
    onUp: () => {
      // Anything announced while we were not listening.
      to.notices.ready();
      to.finishedJobs.announceAll();
      void hearsItself().then((heard) => {
        if (heard === undefined) return;
        if (heard) return log.info('listener up: waking on NOTIFY');
        givenUp = true;
        void listener.stop();
        log.warn(
          { pollIntervalMs, withinMs: CHECK_WITHIN_MS },
          `the listener did not hear its own test NOTIFY (a pooler or proxy between it and the server drops them): ` +
            `waking by polling only, every ${pollIntervalMs} ms; set LISTEN_DATABASE_URL to a direct URL ` +
            'for millisecond wake-ups',
        );
      });
    },
    onDown: (error) => {
      if (!givenUp)
        log.warn({ err: errorForLog(error) }, 'listener down: reconnecting; the poll keeps jobs moving meanwhile');
    },
  });
  /** True when the test NOTIFY came back; undefined when the test could not be sent (the line or the
   * pool is down: the next up tests again). */
  const hearsItself = async (): Promise<boolean | undefined> => {
    const token = randomBytes(8).toString('hex');
    let timer: ReturnType<typeof setTimeout> | undefined;
    const heard = new Promise<boolean>((resolve) => {
      check = { token, heard: () => resolve(true) };
      timer = setTimeout(() => resolve(false), CHECK_WITHIN_MS);
    });
    try {
      await rowsOf(to.db, sql`SELECT pg_notify(${CHECK_CHANNEL}, ${token})`);
    } catch {
      clearTimeout(timer);
      return undefined;
    }
    const result = await heard;
    clearTimeout(timer);
    // Not heard because the line went down meanwhile: not the line's fault.
    if (result) return true;
    return listener.isUp ? false : undefined;
  };
  listener.start();
  return { stop: () => listener.stop() };
}
