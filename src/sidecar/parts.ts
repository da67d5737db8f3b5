// The sidecar is a set of parts started one after another (database, pools, drainer, listener,
// reaper, scheduler, HTTP). This owns them: each started part is stopped exactly once, in the
// reverse order of starting, whether the sidecar stops or a later part fails to start — so a port
// already in use leaves no timer, pool, listener or PostgreSQL behind.
import type { Logger } from 'pino';
import { safeErrorMessage } from '../db/url.ts';

export interface Part {
  stop(): Promise<void> | void;
}

export class Parts {
  readonly #log: Logger;
  readonly #started: { name: string; part: Part }[] = [];
  #stopping: Promise<void> | null = null;

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Starts a part and takes charge of stopping it. */
  async start<T extends Part>(name: string, start: () => Promise<T> | T): Promise<T> {
    if (this.#stopping) throw new Error(`cannot start ${name}: the sidecar is stopping`);
    const part = await start();
    this.#started.push({ name, part });
    return part;
  }

  /** Stops every started part, last first; a part that fails to stop is logged and the rest still stop. */
  stopAll(): Promise<void> {
    this.#stopping ??= (async () => {
      for (const { name, part } of this.#started.reverse()) {
        try {
          await part.stop();
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
