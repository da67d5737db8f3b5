// Applies the drizzle-kit migrations in drizzle/ with drizzle's own migrator. Node only (it reads
// the migration files); the Worker's database is migrated from a workstation or CI with
// `npx pgdrain migrate` (or `npm run db:migrate` in this repo) and DATABASE_URL pointing at Neon.
// Everything, the migrations table included, is in the schema `pgdrain`: an application's own
// drizzle migrations (drizzle.__drizzle_migrations) and tables are never touched.
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { PGDRAIN_SCHEMA } from './schema.ts';

/** drizzle/ beside src/ in this repo, beside dist/ in the npm package. A function, not a constant:
 * a Worker that imports the package's main entry must not resolve a file path at load time. */
export const migrationsFolder = (): string => fileURLToPath(new URL('../../drizzle', import.meta.url));
export const MIGRATIONS_TABLE = 'migrations';

/** Brings the database at `databaseUrl` up to date; safe to call from several processes at once. */
export async function migrateDatabase(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  // An error after connect (server restart) must not crash the caller; the query fails instead.
  client.on('error', () => {});
  await client.connect();
  try {
    // The advisory lock lets several processes start at once without racing the migrator.
    await client.query('SELECT pg_advisory_lock(7477853620)');
    await migrate(drizzle({ client }), {
      migrationsFolder: migrationsFolder(),
      migrationsSchema: PGDRAIN_SCHEMA,
      migrationsTable: MIGRATIONS_TABLE,
    }).catch((error: unknown) => {
      throw new Error(describeMigrationError(error), { cause: error });
    });
  } finally {
    await client.end();
  }
}

/** The database's own message first (drizzle's starts with the whole statement), then where. */
function describeMigrationError(error: unknown): string {
  const { cause, query } = error as { cause?: { message?: string }; query?: string };
  if (!cause?.message) return String((error as Error)?.message ?? error);
  const statement = query?.trim().split('\n')[0];
  return statement ? `${cause.message} (in the migration statement ${JSON.stringify(statement.slice(0, 120))})` : cause.message;
}
