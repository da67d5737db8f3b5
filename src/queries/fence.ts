// The fence every settlement passes through: a statement touches a job only while it is still
// running under the lock token its claim wrote into locked_by. A drainer whose lock was reaped (and
// whose job another drainer may hold now) can neither complete, fail, release nor renew it.
//
//   UPDATE pgdrain.jobs j SET … FROM ${heldRows(held)} WHERE ${fenced(held)}
import { type SQL, sql } from 'drizzle-orm';

/** A job as its drainer holds it: the id and the lock token of its claim. */
export interface HeldJob {
  id: string;
  lockedBy: string;
}

/** More per-job values to carry next to (id, token), as arrays of one PostgreSQL type. */
export type HeldColumns = Record<string, { type: string; values: readonly unknown[] }>;

/**
 * `unnest(ids, tokens, …) AS h(id, token, …)`: the held jobs as rows, aliased `h`, in id order — so
 * that statements touching overlapping jobs (a drainer's renewal and its completion, run on two
 * connections) visit, and lock, them in the same order rather than deadlocking.
 */
export function heldRows(held: readonly HeldJob[], extra: HeldColumns = {}): SQL {
  const sorted = held.every((h, i) => i === 0 || compareDecimal(held[i - 1]!.id, h.id) <= 0);
  const order = sorted ? null : held.map((_, i) => i).sort((a, b) => compareDecimal(held[a]!.id, held[b]!.id));
  const inOrder = <T>(values: readonly T[]) => (order ? order.map((i) => values[i]) : values);
  const columns: [string, string, readonly unknown[]][] = [
    ['id', 'bigint', inOrder(held.map((h) => h.id))],
    ['token', 'text', inOrder(held.map((h) => h.lockedBy))],
    ...Object.entries(extra).map(([name, c]): [string, string, readonly unknown[]] => [
      name,
      c.type,
      inOrder(c.values),
    ]),
  ];
  const arrays = sql.join(
    columns.map(([, type, values]) => sql`${sql.param(values)}::${sql.raw(type)}[]`),
    sql`, `,
  );
  return sql`unnest(${arrays}) AS h(${sql.raw(columns.map(([name]) => name).join(', '))})`;
}

/** Job ids are decimal strings without leading zeros: the shorter is the smaller. */
const compareDecimal = (a: string, b: string) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);

/**
 * The job `j` is the held row `h`, still running under its token. The ids are given once more as
 * an array for the primary key: without them PostgreSQL may start from the `jobs_running` index and
 * compare every running job with every held one (a completion of 50 among 2,000 running took 17 ms
 * that way — four sidecars on one database drained at a third of one's speed); with them it looks
 * up exactly the held jobs.
 */
export function fenced(held: readonly HeldJob[]): SQL {
  return sql`j.id = ANY(${sql.param(held.map((h) => h.id))}::bigint[]) AND j.id = h.id AND j.locked_by = h.token
    AND j.status = 'running'`;
}
