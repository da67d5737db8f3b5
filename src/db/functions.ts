// The SQL functions' one home: each function of the schema pgdrain is one file in src/sql/functions/
// (`<name>.sql`, a `CREATE OR REPLACE FUNCTION pgdrain.<name>(…)` with the comments that say why it
// is written so). Migrate applies them after the ordered migrations, whenever a file changed:
//
//   every file's text (its {{CONSTANTS}} filled in: functionConstants()) hashed
//     ─► all as recorded in pgdrain.functions ──► nothing to do
//     ─► otherwise, in one transaction: every file run (CREATE OR REPLACE; a function whose results
//        or parameters' names change is dropped and created), then every function of the schema
//        pgdrain that no file wrote dropped (an old signature, a retired function), and the hashes
//        recorded — callers see the old set or the new one, never half of each
//
// Bodies are not checked at creation (check_function_bodies off, as pg_dump does), so files need no
// order. The step runs under migrate's lock, like the migrations.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { PgdrainError } from '../errors.ts';
import { functionConstants } from './constants.ts';
import { PGDRAIN_SCHEMA } from './schema.ts';

/** src/sql/functions beside src/db in this repo, dist/sql/functions in the npm package. */
export const functionsFolder = (): string => fileURLToPath(new URL('../sql/functions', import.meta.url));

/** What the step did: the functions it (re)created (all of them, when any file changed) and dropped. */
export interface FunctionsApplied {
  created: string[];
  dropped: string[];
}

export interface FunctionFile {
  /** The function's name: the file's, without `.sql`. */
  name: string;
  /** Its text as applied: the file with its constants filled in. */
  text: string;
  hash: string;
}

/** The function files of `folder`, in name order, as they are applied. */
export function readFunctionFiles(folder = functionsFolder()): FunctionFile[] {
  const constants = functionConstants();
  return readdirSync(folder)
    .filter((file) => file.endsWith('.sql'))
    .sort()
    .map((file) => {
      const name = file.slice(0, -'.sql'.length);
      const text = fillConstants(readFileSync(path.join(folder, file), 'utf8'), constants, file);
      if (!new RegExp(`CREATE OR REPLACE FUNCTION ${PGDRAIN_SCHEMA}\\.${name}\\(`).test(text))
        throw new Error(`${file}: defines no function ${PGDRAIN_SCHEMA}.${name}(…); one file holds one function`);
      return { name, text, hash: createHash('sha256').update(text).digest('hex') };
    });
}

/** `{{NAME}}` replaced by the constant's SQL text; a name with no constant is an error. */
function fillConstants(text: string, constants: Record<string, string>, file: string): string {
  return text.replace(/\{\{([A-Z0-9_]+)\}\}/g, (_, name: string) => {
    const value = constants[name];
    if (value === undefined) throw new Error(`${file}: {{${name}}} names no constant (src/db/constants.ts)`);
    return value;
  });
}

const TABLE = `${PGDRAIN_SCHEMA}.functions`;

/** A function whose file changed what it returns, or its parameters' names: CREATE OR REPLACE
 * refuses (42P13), so the step starts again and drops the function of that name first, in the same
 * transaction as its new definition (no savepoint: a row written in one would carry the
 * subtransaction's id, and the step tells its own functions from older ones by their rows' xmin). */
class ReplaceRefused extends PgdrainError {
  override name = 'ReplaceRefused';
  /** Internal: caught by applyFunctions, which starts again. */
  readonly code = 'function_replace_refused';
  readonly functionName: string;
  constructor(functionName: string) {
    super(`pgdrain.${functionName}() cannot be replaced in place`);
    this.functionName = functionName;
  }
}

/** Runs a function's file (after dropping the function of its name, when it must be). */
async function createFunction(client: pg.Client, file: FunctionFile, dropFirst: boolean): Promise<void> {
  if (dropFirst) {
    const { rows } = await client.query<{ signature: string }>(
      `SELECT p.oid::regprocedure::text AS signature FROM pg_proc p
        WHERE p.pronamespace = $1::regnamespace AND p.proname = $2`,
      [PGDRAIN_SCHEMA, file.name],
    );
    for (const { signature } of rows) await client.query(`DROP FUNCTION ${signature}`);
  }
  try {
    await client.query(file.text);
  } catch (error) {
    if ((error as { code?: string }).code === '42P13' && !dropFirst) throw new ReplaceRefused(file.name);
    throw new Error(`${(error as Error).message} (in src/sql/functions/${file.name}.sql)`, { cause: error });
  }
}

/** Applies the function files if any changed since the last run (see the header). */
export async function applyFunctions(client: pg.Client, folder = functionsFolder()): Promise<FunctionsApplied> {
  const files = readFunctionFiles(folder);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${TABLE}
       (name text PRIMARY KEY, hash text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  const { rows } = await client.query<{ name: string; hash: string }>(`SELECT name, hash FROM ${TABLE}`);
  const recorded = new Map(rows.map((r) => [r.name, r.hash]));
  const current = files.length === recorded.size && files.every((f) => recorded.get(f.name) === f.hash);
  if (current) return { created: [], dropped: [] };
  const dropFirst = new Set<string>();
  for (;;) {
    try {
      return await applyAll(client, files, dropFirst);
    } catch (error) {
      if (!(error instanceof ReplaceRefused) || dropFirst.has(error.functionName)) throw error;
      dropFirst.add(error.functionName);
    }
  }
}

/** One try of the step's transaction (see applyFunctions). */
async function applyAll(client: pg.Client, files: FunctionFile[], dropFirst: Set<string>): Promise<FunctionsApplied> {
  let dropped: string[] = [];
  await client.query('BEGIN');
  try {
    // A migration's statements are not the app's queries: no DBA's statement_timeout cuts them short.
    await client.query(`SET LOCAL lock_timeout = 400; SET LOCAL statement_timeout = 0`);
    await client.query('SET LOCAL check_function_bodies = off');
    for (const file of files) await createFunction(client, file, dropFirst.has(file.name));
    // Every function CREATE OR REPLACE wrote above has its catalog row written by this transaction;
    // any other in the schema is left from an older version.
    const { rows: stale } = await client.query<{ signature: string }>(
      `SELECT p.oid::regprocedure::text AS signature FROM pg_proc p
        WHERE p.pronamespace = $1::regnamespace AND p.prokind = 'f'
          AND p.xmin::text::bigint <> pg_current_xact_id()::text::bigint % 4294967296
        ORDER BY 1`,
      [PGDRAIN_SCHEMA],
    );
    dropped = stale.map((s) => s.signature);
    for (const signature of dropped) await client.query(`DROP FUNCTION ${signature}`);
    await client.query(`DELETE FROM ${TABLE}`);
    await client.query(`INSERT INTO ${TABLE} (name, hash) SELECT * FROM unnest($1::text[], $2::text[])`, [
      files.map((f) => f.name),
      files.map((f) => f.hash),
    ]);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
  return { created: files.map((f) => f.name), dropped };
}
