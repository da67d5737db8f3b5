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
