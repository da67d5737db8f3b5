import { defineConfig } from 'drizzle-kit';

// Everything of pgdrain lives in the PostgreSQL schema `pgdrain`, its migrations table included,
// so it never collides with an application's own tables or its own drizzle migrations.
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema.ts',
  out: './drizzle',
  schemaFilter: ['pgdrain'],
  migrations: { schema: 'pgdrain', table: 'migrations' },
  dbCredentials: { url: process.env.DATABASE_URL ?? 'postgres://localhost/pgdrain' },
});
