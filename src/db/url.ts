/** The URL with its password replaced, fit for logs and error messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable database URL)';
  }
}

/** An error's message fit for a log line: any connection string in it has its password masked. */
export function safeErrorMessage(error: unknown): string {
  const message = String((error as { message?: unknown } | null)?.message ?? error);
  return message.replace(/postgres(ql)?:\/\/[^\s'"]+/g, (url) => redactUrl(url));
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
