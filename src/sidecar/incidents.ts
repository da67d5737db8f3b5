// Database trouble, logged for people: one line when an incident starts (what failed, why), one when
// it ends (how many failures it spanned), nothing per failed poll in between. The server shutting
// down or restarting is expected in operation (and at our own shutdown when Ctrl-C reaches the
// embedded server first): a warning, not an error.
import type { Logger } from 'pino';
import { isServerShuttingDown } from '../db/errors.ts';
import { safeErrorMessage } from '../db/url.ts';

export class Incidents {
  readonly #log: Logger;
  readonly #open = new Map<string, number>();

  constructor(log: Logger) {
    this.#log = log;
  }

  start(what: string, error: unknown): void {
    const count = this.#open.get(what);
    this.#open.set(what, (count ?? 0) + 1);
    if (count !== undefined) return;
    this.#log[isServerShuttingDown(error) ? 'warn' : 'error'](
      { err: errorForLog(error) },
      `${what}: database error; retrying quietly until it recovers`,
    );
  }

  end(what: string): void {
    const count = this.#open.get(what);
    if (count === undefined) return;
    this.#open.delete(what);
    this.#log.info({ failures: count }, `${what}: database reachable again`);
  }
}

/** An error for the log: message and code, never a connection string. */
export function errorForLog(error: unknown): { message: string; code?: string } {
  const code = (error as { code?: unknown } | null)?.code;
  const message = safeErrorMessage(error);
  return typeof code === 'string' ? { message, code } : { message };
}
