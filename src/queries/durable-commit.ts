// durable-commit: a transaction on the drain's connections (which commit asynchronously: a claim or
// settlement lost in a server crash only runs a job again) that enqueues work — a child of
// step.invoke — commits durably all the same: the setting lasts until this transaction ends and
// reaches no other statement of the connection.
import { sql } from 'drizzle-orm';
import type { Db } from './db.ts';

/** Call first in `tx`: its COMMIT waits for the WAL flush, whatever the connection's default. */
export async function commitDurably(tx: Db): Promise<void> {
  await tx.execute(sql`SELECT set_config('synchronous_commit', 'on', true)`);
}
