// `pgdrain migrate --jobs FILE`: the event subscriptions (`on`) of a module's kinds written to the
// database, so that events sent from SQL fan out to them before any drainer of theirs has started.
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { JobRegistry } from '../jobs/registry.ts';
import { subscribe } from '../jobs/subscriptions.ts';
import type { Db } from '../queries/index.ts';
import { loadJobsModule } from '../sidecar/jobs-module.ts';

/** Writes the subscriptions of the kinds `modulePath` exports; a line saying how many. */
export async function subscribeModule(databaseUrl: string, modulePath: string): Promise<string> {
  const { jobs } = await loadJobsModule(modulePath);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1, application_name: 'pgdrain-migrate' });
  pool.on('error', () => {});
  try {
    const count = await subscribe(drizzle({ client: pool }) as unknown as Db, new JobRegistry(jobs));
    return (
      `${count} event subscription${count === 1 ? '' : 's'} written for ${jobs.length} ` +
      `kind${jobs.length === 1 ? '' : 's'}`
    );
  } finally {
    await pool.end();
  }
}
