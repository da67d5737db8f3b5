// Database trouble, logged for people: one line when an incident starts (what failed, why, in the
// database's words), one when it ends (how many failures it spanned, and which parts met it),
// nothing per failed poll in between. A failure of the moment — the database out of reach, too many
// clients, a full disk — is one incident for the whole sidecar, whichever parts meet it (the drain,
// its settlements, the reaper, the schedules, the pools): one outage, one line, not one per part.
// Any other failure is its part's own. The server shutting down or restarting is expected in
// operation (and at our own shutdown when Ctrl-C reaches the embedded server first): a warning, not
// an error.
import type { Logger } from 'pino';
import { isServerShuttingDown, isTransientFailure } from '../db/errors.ts';
import { safeErrorMessage } from '../db/url.ts';

/** The incident every part's failure of the moment joins. */
const DATABASE = 'database';

export class Incidents {
  readonly #log: Logger;
  readonly #open = new Map<string, { failures: number; parts: Set<string> }>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** `part` failed with `error`: a new incident is logged, an open one counts it. */
  start(part: string, error: unknown): void {
    const key = isTransientFailure(error) ? DATABASE : part;
    const open = this.#open.get(key);
    if (open) {
      open.failures++;
      open.parts.add(part);
      return;
    }
    this.#open.set(key, { failures: 1, parts: new Set([part]) });
    this.#log[isServerShuttingDown(error) ? 'warn' : 'error'](
      { err: errorForLog(error), part },
      key === DATABASE
        ? `the database failed (${part}); every part retries quietly until it recovers`
        : `${part}: database error; retrying quietly until it recovers`,
    );
  }

  /** `part` succeeded again: the incidents it was in are over. */
  end(part: string): void {
    for (const [key, open] of this.#open) {
      if (key !== part && !(key === DATABASE && open.parts.has(part))) continue;
      this.#open.delete(key);
      this.#log.info(
        { failures: open.failures, parts: [...open.parts] },
        key === DATABASE ? 'database reachable again' : `${part}: database reachable again`,
      );
    }
  }
}

/** An error for the log: message and code, never a connection string. */
export function errorForLog(error: unknown): { message: string; code?: string } {
  const code = (error as { code?: unknown } | null)?.code;
  const message = safeErrorMessage(error);
  return typeof code === 'string' ? { message, code } : { message };
}
