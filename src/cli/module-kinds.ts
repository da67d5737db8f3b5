// `pgdrain migrate --jobs FILE`: a module's kinds written to the database (runtime/core.ts
// registerKinds, as a drainer writes them at its start, without replaying runs: its drainers do):
// their options in pgdrain.kinds, so a job enqueued from SQL gets them, and their event
// subscriptions (`on`), so events sent from SQL fan out to them, before any drainer of theirs starts.
import { hostname } from 'node:os';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { libpqUrl } from '../db/url.ts';
import { JobRegistry } from '../jobs/registry.ts';
import type { Db } from '../queries/index.ts';
import { registerKinds } from '../runtime/core.ts';
import { loadJobsModule } from '../sidecar/jobs-module.ts';

/** Writes the kinds `modulePath` exports and their subscriptions; lines saying what was written. */
export async function writeModuleKinds(databaseUrl: string, modulePath: string): Promise<string[]> {
  const { jobs } = await loadJobsModule(modulePath);
  const pool = new pg.Pool({ connectionString: libpqUrl(databaseUrl), max: 1, application_name: 'pgdrain-migrate' });
  pool.on('error', () => {});
  try {
    const db = drizzle({ client: pool }) as unknown as Db;
    const registry = new JobRegistry(jobs);
    const written = await registerKinds(db, registry, `pgdrain migrate on ${hostname()}`, { replay: false });
    const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
    return [
      `${plural(registry.kinds().length, 'kind')} written, with ${plural(written.subscriptions, 'event subscription')}`,
      ...written.replaced.map(
        (r) => `kind ${r.kind} replaces the definition ${r.writtenBy} wrote: ${r.differences.join('; ')}`,
      ),
    ];
  } finally {
    await pool.end();
  }
}
