// JSON as pgdrain stores it (results, progress, step results, event payloads) and the text of a
// thrown value as a job's last_error: one module, used by the drain, the workflows and the events.
import { underQueryWrapper } from './db/errors.ts';
import { safeErrorMessage } from './db/url.ts';

/**
 * JSON text of `value` (null for undefined); TypeError naming `what` when it is not JSON that reads
 * back as it went in: NaN and ±Infinity (JSON.stringify writes null), a Map, a Set or an instance of
 * a class without toJSON (written as {} or a plain object). Kept as JSON keeps them: a Date (or
 * anything with toJSON) as what its toJSON gives, object members that are undefined or functions
 * left out, such array elements as null.
 */
export function toJson(value: unknown, what: string): string | null {
  if (value === undefined) return null;
  let json: string | undefined;
  try {
    json = JSON.stringify(value, exactJson());
  } catch (error) {
    throw new TypeError(`${what} is not JSON: ${(error as Error).message}`);
  }
  if (json === undefined) throw new TypeError(`${what} is not JSON (a ${typeof value})`);
  return json;
}

/** A replacer that refuses what JSON cannot hold as it is, naming where it is in the value
 * (`.items[2].amount`): each object's path is kept for its members' own. */
function exactJson() {
  const paths = new WeakMap<object, string>();
  return function replacer(this: unknown, key: string, value: unknown): unknown {
    const holder = this as object;
    const path =
      key === '' && paths.get(holder) === undefined
        ? ''
        : `${paths.get(holder) ?? ''}${Array.isArray(holder) ? `[${key}]` : `.${key}`}`;
    const at = path === '' ? '' : ` at ${path}`;
    if (typeof value === 'bigint') throw new TypeError(`a BigInt${at} has no JSON form (return it as a string)`);
    if (typeof value === 'number' && !Number.isFinite(value))
      throw new TypeError(`${value}${at} has no JSON form (it would be stored as null)`);
    if (value !== null && typeof value === 'object') {
      if (!Array.isArray(value) && !(value instanceof Number || value instanceof String || value instanceof Boolean)) {
        const proto = Object.getPrototypeOf(value);
        if (proto !== Object.prototype && proto !== null) {
          const name = (value as { constructor?: { name?: string } }).constructor?.name || 'object';
          throw new TypeError(
            `a ${name}${at} has no JSON form of its own (it would be stored as a plain object); return plain ` +
              `objects, arrays, strings, numbers, booleans or null`,
          );
        }
      }
      paths.set(value, path);
    }
    return value;
  };
}

/** More than `bytes` bytes of UTF-8. Every UTF-16 unit is at most 3 bytes: short texts are not encoded. */
export function longerThan(text: string, bytes: number): boolean {
  return text.length * 3 > bytes && utf8Length(text) > bytes;
}

export function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}

/** A readable last_error for anything a handler can throw (a database error in the database's own
 * words, never the statement that failed: db/url.ts safeErrorMessage). */
export function errorText(error: unknown): string {
  if (error instanceof Error) {
    const message = safeErrorMessage(error) || '(no message)';
    const shown = underQueryWrapper(error);
    const name = shown instanceof Error ? shown.name : '';
    return name && name !== 'Error' && !/^(error|DatabaseError)$/i.test(name) ? `${name}: ${message}` : message;
  }
  if (typeof error === 'string') return error;
  if (error === undefined) return 'handler threw undefined';
  try {
    return `handler threw a non-Error value: ${JSON.stringify(error)}`;
  } catch {
    return `handler threw a non-Error value: ${String(error)}`;
  }
}
