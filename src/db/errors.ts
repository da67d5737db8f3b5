// What a database error means for the caller, whichever driver raised it (node-postgres, Neon's,
// pg-cloudflare): the database is out of reach (retry later; the API answers 503), or the server
// is shutting down or restarting (expected in operation: a warning, not an error).

/** 57P01-57P03: an administrator's shutdown, a crash recovery, a server starting up. */
/** What the drivers say when the connection to the server went away. */
const LOST_CONNECTION_MESSAGE = new RegExp(
  'Connection terminated|connection .*(closed|lost|timeout)|Network connection lost|ECONNREFUSED|' +
    'terminating connection',
  'i',
);

export function isServerShuttingDown(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^57P0[123]$/.test(code);
}

/** Connection-level failures (refused, reset, server shutting down, too many clients), as opposed to bad SQL. */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (isServerShuttingDown(e)) return true;
    const code = String((e as { code?: unknown }).code ?? '');
    if (/^(08|53300)/.test(code) || /^E(CONNREFUSED|CONNRESET|PIPE|TIMEDOUT|HOSTUNREACH|NOTFOUND|AI_AGAIN)$/.test(code))
      return true;
    const message = String((e as { message?: unknown }).message ?? '');
    if (LOST_CONNECTION_MESSAGE.test(message)) return true;
  }
  return false;
}

/** 40P01 deadlock_detected, 40001 serialization_failure: the statement was rolled back and can be
 * sent again as it was. */
export function isTransientConflict(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === '40P01' || code === '40001') return true;
  }
  return false;
}

/** A failure of the moment, not of the statement: the database out of reach, a connection lost, too
 * many clients, a full disk or out of memory (class 53), a server shutting down. The same statement
 * may succeed when sent again later (a settlement is: settler.ts). */
export function isTransientFailure(error: unknown): boolean {
  if (isDatabaseUnavailable(error)) return true;
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++)
    if (/^53/.test(String((e as { code?: unknown }).code ?? ''))) return true;
  return false;
}

/** A SQLSTATE: five digits or capital letters. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/**
 * What went wrong, in the database's own words, in one line: the server's message and its SQLSTATE
 * (`sorry, too many clients already (SQLSTATE 53300)`), or the driver's for a connection that went.
 * A query builder's wrapper (drizzle's `Failed query: <statement> params: …`) is looked through to
 * its cause: a statement's text and parameters never reach a log line, an answer or a last_error
 * (they may hold payloads and secrets). Anything else: its message, as it is.
 */
export function databaseErrorText(error: unknown): string {
  const e = underQueryWrapper(error);
  if (e === undefined && error !== undefined) return 'a statement failed (the database gave no reason)';
  const message = String((e as { message?: unknown } | null)?.message ?? e);
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SQLSTATE.test(code) && !message.includes(code)
    ? `${message} (SQLSTATE ${code})`
    : message;
}

/** The error under a query builder's wrappers (undefined: a wrapper with no cause). */
export function underQueryWrapper(error: unknown): unknown {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && isQueryWrapper(e); depth++) e = (e as { cause?: unknown }).cause;
  return isQueryWrapper(e) ? undefined : e;
}

/** drizzle's DrizzleQueryError (and any wrapper like it): its message is the statement. */
function isQueryWrapper(error: unknown): boolean {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' && message.startsWith('Failed query:');
}

/** What an API answer says of a database failure: its class, not its details. */
export interface DatabaseFailure {
  status: 503 | 507;
  code: string;
  message: string;
}

/** SQLSTATEs whose class a caller can act on, before the catch-all of a database out of reach. */
const FAILURE_CLASSES: [RegExp, DatabaseFailure][] = [
  [
    /^53300$/,
    {
      status: 503,
      code: 'database_busy',
      message: 'the database refuses more connections (too many clients); nothing was changed, try again shortly',
    },
  ],
  [
    /^53100$/,
    {
      status: 507,
      code: 'database_full',
      message: "the database's disk is full; nothing was changed until space is freed",
    },
  ],
  [
    /^53/,
    {
      status: 503,
      code: 'database_busy',
      message: 'the database is out of a resource (memory, locks); nothing was changed, try again shortly',
    },
  ],
  [
    /^57014$/,
    {
      status: 503,
      code: 'database_timeout',
      message: 'the database cancelled the statement (a statement_timeout); nothing was changed',
    },
  ],
  [
    /^25006$/,
    {
      status: 503,
      code: 'database_read_only',
      message: 'the database is read-only (a standby, or a read-only role); nothing was changed',
    },
  ],
];

/** What an API answer says when the database refused a value of the request itself. */
export interface DatabaseRefusal {
  status: 400 | 413;
  code: string;
  message: string;
  /** A check pgdrain's own functions make (their messages start `pgdrain.`): the refusal is the
   * answer. Otherwise a value passed every check in TypeScript and the server refused it (class 22,
   * a data exception, or 54000, a value past a limit): answered 4xx, and logged as a check missing. */
  expected: boolean;
}

/** The database refused a value of the request (class 22, 54000, or a pgdrain function's check of
 * its parameters), or null. The server's message names the value's problem, not the statement. */
export function databaseRefusal(error: unknown): DatabaseRefusal | null {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code !== 'string' || !/^(22...|54000)$/.test(code)) continue;
    const said = String((e as { message?: unknown }).message ?? '').slice(0, 300);
    const expected = said.startsWith('pgdrain.');
    if (code === '54000')
      return {
        status: 413,
        code: 'payload_too_large',
        message: expected ? said : `a value is larger than the database takes: ${said}`,
        expected,
      };
    return {
      status: 400,
      code: 'invalid_request',
      message: expected ? said : `the database refused a value of the request: ${said}`,
      expected,
    };
  }
  return null;
}

/** The class of a database failure an answer names, or null: not one the caller can act on. */
export function databaseFailure(error: unknown): DatabaseFailure | null {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code !== 'string') continue;
    for (const [pattern, failure] of FAILURE_CLASSES) if (pattern.test(code)) return failure;
  }
  if (isDatabaseUnavailable(error))
    return {
      status: 503,
      code: 'database_unavailable',
      message: 'the database is unreachable; nothing was changed, try again shortly',
    };
  return null;
}
