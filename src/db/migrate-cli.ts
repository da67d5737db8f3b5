// npm run db:migrate — applies drizzle/ to DATABASE_URL (your own server or Neon's direct URL).
import { migrateDatabase } from './migrate.ts';
import { redactUrl } from './url.ts';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('db:migrate: set DATABASE_URL to the database to migrate, e.g. DATABASE_URL=postgres://user:pass@host/db npm run db:migrate');
  process.exit(2);
}
try {
  await migrateDatabase(url);
  console.log(`db:migrate: ${redactUrl(url)} is up to date`);
} catch (error) {
  console.error(`db:migrate: failed on ${redactUrl(url)}: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
