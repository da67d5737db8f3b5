// Reading a request: JSON bodies (with what PostgreSQL cannot store refused up front), query and
// path parameters checked against the contract's schemas. Every refusal is a 4xx ApiError naming
// the field, and nothing has been changed by then.
import type { Context } from 'hono';
import type { z } from 'zod';
import { isJobId } from '../queries/index.ts';
import { ApiError } from './errors.ts';

/** Deeper JSON is refused: validation walks it recursively, and no job payload needs more. */
export const MAX_JSON_DEPTH = 64;
/** A body holds at most this many JSON values (each array element and object member, nested ones
 * too): a kind's schema walks them all, and 1 MB of `{},` would be 330k. */
export const MAX_JSON_VALUES = 100_000;

export async function readJson(c: Context): Promise<unknown> {
  const type = c.req.header('content-type') ?? '';
  if (!/^application\/([\w.+-]+\+)?json\b/i.test(type)) {
    throw new ApiError(415, 'unsupported_media_type', 'send the body as JSON with `Content-Type: application/json`');
  }
  const text = await c.req.text();
  const tooLarge = tooManyValues(text);
  if (tooLarge) throw new ApiError(400, 'invalid_request', tooLarge);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new ApiError(
      400,
      'malformed_json',
      `the body is not valid JSON: ${error instanceof SyntaxError ? error.message : 'parse error'}`,
    );
  }
  const problem = findUnstorable(body);
  if (problem) throw new ApiError(400, 'invalid_request', problem);
  return body;
}

/**
 * Refused by its shape before it is parsed: a body with MAX_JSON_VALUES commas outside strings holds
 * more values than that (each comma separates two), which the walk after parsing would refuse too —
 * one pass over the text, a few milliseconds for a megabyte, instead of parsing a quarter of a
 * million values and walking them while every other request waits.
 */
function tooManyValues(text: string): string | null {
  if (text.length < MAX_JSON_VALUES) return null;
  let commas = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x2c && ++commas >= MAX_JSON_VALUES) return TOO_MANY_VALUES;
  }
  return null;
}

const TOO_MANY_VALUES = `(body): holds more than ${MAX_JSON_VALUES} JSON values`;

/** A JSON body, or {} when there is none at all. */
export async function readOptionalJson(c: Context): Promise<unknown> {
  const length = c.req.header('content-length');
  if ((length === undefined || length === '0') && !c.req.header('content-type') && !c.req.header('transfer-encoding'))
    return {};
  return readJson(c);
}

/** `value` checked against `schema`; a 400 naming up to five fields (`prefix` before each) otherwise. */
export function parseInput<T extends z.ZodType>(schema: T, value: unknown, prefix: string): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  // One message per field: a value can break several rules that say the same (1e308 is neither
  // whole nor within bounds), and the first one names the bounds.
  const seen = new Set<string>();
  const message = result.error.issues
    .map((i) => ({ field: `${prefix}${formatPath(i.path) || '(body)'}`, text: i.message }))
    .filter(({ field }) => !seen.has(field) && seen.add(field))
    .slice(0, 5)
    .map(({ field, text }) => `${field}: ${text}`)
    .join('; ');
  throw new ApiError(400, 'invalid_request', message);
}

/** The :id path parameter, a job id (400 otherwise). */
export function jobIdParam(c: Context): string {
  const id = c.req.param('id') ?? '';
  if (!isJobId(id))
    throw new ApiError(400, 'invalid_id', `job id ${JSON.stringify(id.slice(0, 40))} is not a positive integer`);
  return id;
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${String(p)}` : String(p)),
    '',
  );
}

/**
 * The first thing in a parsed body that PostgreSQL cannot store as it was sent, or that validation
 * must not walk: a number JSON.parse could not hold (1e400 parses as Infinity), a string or key
 * holding U+0000 (jsonb and text refuse it), a lone UTF-16 surrogate (not Unicode; jsonb refuses
 * it), nesting past MAX_JSON_DEPTH, or more than MAX_JSON_VALUES values. One pass, iterative, so any
 * depth is safe; the value count is checked before a container's children are taken on, so an
 * oversized body is refused without walking it, and a value's path is spelled out only for the report.
 */
function findUnstorable(root: unknown): string | null {
  const stack: Frame[] = [{ value: root, parent: null, key: null, depth: 0 }];
  let values = 1;
  const tooMany = TOO_MANY_VALUES;
  while (stack.length > 0) {
    const frame = stack.pop()!;
    const { value, depth } = frame;
    if (typeof value === 'string') {
      const problem = badString(value);
      if (problem) return `${pathOf(frame)}: ${problem}`;
    } else if (typeof value === 'number') {
      if (!Number.isFinite(value))
        return (
          `${pathOf(frame)}: a number too large for JSON to hold (it would be stored as ${value}); numbers ` +
          `must be within ±1.7976931348623157e308`
        );
    } else if (value !== null && typeof value === 'object') {
      if (depth >= MAX_JSON_DEPTH) return `${pathOf(frame)}: nested deeper than ${MAX_JSON_DEPTH} levels`;
      // Pushed in reverse so that the first problem in document order is the one reported.
      if (Array.isArray(value)) {
        if ((values += value.length) > MAX_JSON_VALUES) return tooMany;
        for (let i = value.length - 1; i >= 0; i--)
          stack.push({ value: value[i], parent: frame, key: i, depth: depth + 1 });
      } else {
        const keys = Object.keys(value);
        if ((values += keys.length) > MAX_JSON_VALUES) return tooMany;
        for (let i = keys.length - 1; i >= 0; i--) {
          const key = keys[i]!;
          const child: Frame = { value: (value as Record<string, unknown>)[key], parent: frame, key, depth: depth + 1 };
          const problem = badString(key);
          if (problem) return `${pathOf(child)}: ${problem}`;
          stack.push(child);
        }
      }
    }
  }
  return null;
}

interface Frame {
  value: unknown;
  parent: Frame | null;
  key: string | number | null;
  depth: number;
}

/** `a.b[2].c`, or `(body)` for the body itself. */
function pathOf(frame: Frame): string {
  const keys: (string | number)[] = [];
  for (let f: Frame | null = frame; f && f.key !== null; f = f.parent) keys.push(f.key);
  return formatPath(keys.reverse()) || '(body)';
}

function badString(text: string): string | null {
  return text.includes('\u0000')
    ? 'contains the NUL character (\\u0000), which PostgreSQL cannot store'
    : !text.isWellFormed()
      ? 'contains a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode and PostgreSQL cannot store'
      : null;
}
