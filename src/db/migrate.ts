// Applies the drizzle-kit migrations in drizzle/ with drizzle's own migrator. Node only (it reads
// the migration files); the Worker's database is migrated from a workstation or CI with
// `npm run db:migrate` and DATABASE_URL pointing at Neon.
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle', import.meta.url));

export async function migrateDatabase(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  // An error after connect (server restart) must not crash the caller; the query fails instead.
  client.on('error', () => {});
  await client.connect();
  try {
    // The advisory lock lets several processes start at once without racing the migrator.
    await client.query('SELECT pg_advisory_lock(7477853620)');
    await migrate(drizzle({ client }), { migrationsFolder: MIGRATIONS_FOLDER });
  } finally {
    await client.end();
  }
}
