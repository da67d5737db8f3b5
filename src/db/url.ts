/** Connection parameters that carry a secret, wherever a connection string can hold them. */
const SECRET_PARAMETERS = ['password', 'sslpassword'];
const MASK = '***';

/** The URL with its secrets replaced (the user-info password, `password=` and `sslpassword=`
 * parameters), fit for logs and error messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = MASK;
    for (const name of [...parsed.searchParams.keys()]) {
      if (SECRET_PARAMETERS.includes(name.toLowerCase())) parsed.searchParams.set(name, MASK);
    }
    return parsed.toString();
  } catch {
    return '(unparseable database URL)';
  }
}

/** `password=…` and `sslpassword=…` of a key=value connection string (`host=db password='x y'`). */
const KEY_VALUE_SECRET = new RegExp(
  `\\b(${SECRET_PARAMETERS.join('|')})(\\s*=\\s*)('(?:[^'\\\\]|\\\\.)*'|[^\\s'"]+)`,
  'gi',
);

/** An error's message fit for a log line: every connection string in it, URL or key=value, has its
 * secrets masked. */
export function safeErrorMessage(error: unknown): string {
  const message = String((error as { message?: unknown } | null)?.message ?? error);
  return message
    .replace(/postgres(ql)?:\/\/[^\s'"]+/g, (url) => redactUrl(url))
    .replace(KEY_VALUE_SECRET, (_, name: string, equals: string) => `${name}${equals}${MASK}`);
}

/**
 * The URL with a placeholder password when it has none: local Hyperdrive (wrangler dev, the Workers
 * test pool) refuses a connection string without one, even where the server's trust auth ignores it.
 */
export function withPlaceholderPassword(url: string): string {
  const parsed = new URL(url);
  if (!parsed.password) parsed.password = 'local';
  return parsed.toString();
}
