import { databaseErrorText } from './errors.ts';

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

/** An error's message fit for a log line, an answer or a last_error: the database's own words for a
 * database error (errors.ts: never a statement's text or parameters), and every connection string
 * in it, URL or key=value, with its secrets masked. */
export function safeErrorMessage(error: unknown): string {
  const message = databaseErrorText(error);
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

/**
 * `url` with TLS as libpq means it (docs/postgres.md, TLS): node-postgres reads `sslmode=require`
 * as verify-full, so a server with a self-signed certificate is refused where psql connects, and it
 * ignores PGSSLMODE and PGSSLROOTCERT once the URL has any TLS setting. Here `sslmode` and
 * `sslrootcert` come from the URL, else from PGSSLMODE and PGSSLROOTCERT, and the URL asks
 * node-postgres for libpq's meanings (`uselibpqcompat`): `require` encrypts without verifying (or
 * verifies the CA, with `sslrootcert`), `verify-ca` checks the CA only, `verify-full` the CA and the
 * host name, `disable` does not encrypt; `sslrootcert=system` verifies against the system's CAs.
 * `prefer` and `allow` encrypt without verifying and, unlike libpq, do not fall back to plain
 * connections. Without an sslmode (in the URL or PGSSLMODE) the URL is left as it is: no TLS, as
 * node-postgres does (libpq would try it first).
 */
export function libpqUrl(url: string, env: Record<string, string | undefined> = process.env): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  const params = parsed.searchParams;
  if (!params.has('sslmode') && env.PGSSLMODE) params.set('sslmode', env.PGSSLMODE);
  if (!params.has('sslmode') || params.has('uselibpqcompat')) return url;
  if (!params.has('sslrootcert') && env.PGSSLROOTCERT) params.set('sslrootcert', env.PGSSLROOTCERT);
  if (params.get('sslrootcert') === 'system') {
    params.delete('sslrootcert');
    if (params.get('sslmode') !== 'verify-ca') params.set('sslmode', 'verify-full');
  }
  if (params.get('sslmode') === 'allow') params.set('sslmode', 'prefer');
  params.set('uselibpqcompat', 'true');
  return parsed.toString();
}
