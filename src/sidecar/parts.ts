// The sidecar is a set of parts started one after another (database, pools, drainer, listener,
// reaper, scheduler, HTTP). This owns them: each started part is stopped exactly once, in the
// reverse order of starting, whether the sidecar stops or a later part fails to start — so a port
// already in use leaves no timer, pool, listener or PostgreSQL behind. A part that has not stopped
// within its time (10 s; the drainer's grace period more) is logged and left, so that a stop always
// ends and the process exits: what it held is returned by the reaper, as after kill -9.
import type { Logger } from 'pino';
import { safeErrorMessage } from '../db/url.ts';

export interface Part {
  stop(): Promise<void> | void;
}

export class Parts {
  readonly #log: Logger;
  readonly #started: { name: string; part: Part; stopWithinMs: number }[] = [];
  #stopping: Promise<void> | null = null;

  readonly #signal: AbortSignal | undefined;

  /** `signal`: the start is called off (a SIGTERM while starting): no part starts after it. */
  constructor(log: Logger, signal?: AbortSignal) {
    this.#log = log;
    this.#signal = signal;
  }

  /** Starts a part and takes charge of stopping it. */
  async start<T extends Part>(
    name: string,
    start: () => Promise<T> | T,
    { stopWithinMs = DEFAULT_STOP_WITHIN_MS }: { stopWithinMs?: number } = {},
  ): Promise<T> {
    if (this.#stopping) throw new Error(`cannot start ${name}: the sidecar is stopping`);
    this.#signal?.throwIfAborted();
    const part = await start();
    this.#started.push({ name, part, stopWithinMs });
    // Called off while it started: stopped with the rest.
    this.#signal?.throwIfAborted();
    return part;
  }

  /** Stops every started part, last first; a part that fails to stop is logged and the rest still stop. */
  stopAll(): Promise<void> {
    this.#stopping ??= (async () => {
      for (const { name, part, stopWithinMs } of this.#started.reverse()) {
        try {
          if (!(await stopsWithin(part, stopWithinMs))) {
            this.#log.error(
              { part: name, stopWithinMs },
              'a part of the sidecar did not stop in time: left behind so that the stop ends',
            );
          }
        } catch (error) {
          this.#log.warn(
            { err: { message: safeErrorMessage(error) }, part: name },
            'a part of the sidecar did not stop cleanly',
          );
        }
      }
    })();
    return this.#stopping;
  }
}

/** How long a part may take to stop, unless it says otherwise. */
export const DEFAULT_STOP_WITHIN_MS = 10_000;

/** True when the part stopped within `ms`; a stop that throws rethrows. */
async function stopsWithin(part: Part, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      Promise.resolve(part.stop()).then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
