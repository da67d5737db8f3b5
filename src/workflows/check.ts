// A pre-deploy check: every workflow run in flight (pending, running, waiting, held) replayed
// against the definitions about to be deployed, with nothing run, parked or written. A step with a
// record returns it; the replay stops at the first step that would do something. What it finds,
// per run:
//
//   fits        the code meets its history: the new deploy goes on with it
//   diverges    the code departs from its history: the new deploy would hold it (its step, why)
//   fails       the payload no longer fits the kind's schema (it would go dead), or the code throws
//               before it reaches a step that would run
//   unclaimable its version is not among the definitions: no drainer of this deploy claims it
//
// `pgdrain workflows check --jobs FILE` prints it and exits 1 when any run would diverge or fail; the
// same function is `checkWorkflows` in pgdrain/testing, for a CI gate of your own. Runs are read a
// page at a time (two statements a page), so a queue of any size is checked in bounded memory.
import type { JobDefinition } from '../jobs/definition.ts';
import { JobRegistry } from '../jobs/registry.ts';
import { errorText } from '../json.ts';
import { type ClaimedJob, type Db, type RunInFlight, runsInFlight } from '../queries/index.ts';
import { type WorkflowChange, isWorkflow, replayAgainstHistory } from './index.ts';

export interface WorkflowCheckProblem {
  id: string;
  kind: string;
  /** The version the run started on (1: none given). */
  version: number;
  status: string;
  /** diverges: the step the code departs at; fails: null. */
  step: string | null;
  why: string;
}

export interface WorkflowCheckReport {
  /** Runs replayed. */
  checked: number;
  diverges: WorkflowCheckProblem[];
  fails: WorkflowCheckProblem[];
  /** Runs whose version the definitions do not have, by kind and version: no drainer of them claims these. */
  unclaimable: { kind: string; version: number; runs: number }[];
  /** Per kind: runs checked, and how many would diverge or fail. */
  kinds: Record<string, { checked: number; diverges: number; fails: number }>;
}

export interface CheckWorkflowsOptions {
  /** Runs read at a time. Default 500. */
  pageSize?: number;
  /** Keep at most this many problems of each sort in the report (the counts stay whole). Default 1,000. */
  maxListed?: number;
}

/** Replays every workflow run in flight against `definitions`; see the header. */
export async function checkWorkflows(
  db: Db,
  definitions: readonly JobDefinition<any>[] | JobRegistry,
  { pageSize = 500, maxListed = 1_000 }: CheckWorkflowsOptions = {},
): Promise<WorkflowCheckReport> {
  const registry = definitions instanceof JobRegistry ? definitions : new JobRegistry(definitions);
  const kinds = registry.kinds().filter((kind) => isWorkflow(registry.get(kind)));
  const report: WorkflowCheckReport = { checked: 0, diverges: [], fails: [], unclaimable: [], kinds: {} };
  const unclaimable = new Map<string, { kind: string; version: number; runs: number }>();
  let after: string | null = null;
  for (;;) {
    const page = await runsInFlight(db, kinds, after, pageSize);
    if (page.length === 0) break;
    after = page.at(-1)!.id;
    for (const run of page) {
      const version = run.version ?? 1;
      const definition = registry.get(run.kind, run.version);
      if (!definition) {
        const key = `${run.kind}@${version}`;
        const entry = unclaimable.get(key) ?? { kind: run.kind, version, runs: 0 };
        entry.runs++;
        unclaimable.set(key, entry);
        continue;
      }
      const found = await checkRun(db, definition, run);
      const counts = (report.kinds[run.kind] ??= { checked: 0, diverges: 0, fails: 0 });
      counts.checked++;
      report.checked++;
      if (found === null) continue;
      const problem = { id: run.id, kind: run.kind, version, status: run.status, ...found.problem };
      counts[found.sort]++;
      if (report[found.sort].length < maxListed) report[found.sort].push(problem);
    }
  }
  report.unclaimable = [...unclaimable.values()];
  return report;
}

/** One run replayed: null when it fits, else what is wrong and of which sort. */
async function checkRun(
  db: Db,
  definition: JobDefinition<any>,
  run: RunInFlight,
): Promise<{ sort: 'diverges' | 'fails'; problem: { step: string | null; why: string } } | null> {
  const parsed = definition.schema.safeParse(run.payload);
  if (!parsed.success)
    return {
      sort: 'fails',
      problem: { step: null, why: `its payload no longer fits the kind's schema: ${parsed.error.message}` },
    };
  const job = {
    id: run.id,
    kind: run.kind,
    version: run.version,
    payload: run.payload,
    lockedBy: 'pgdrain-workflows-check',
    attempts: 0,
  } as unknown as ClaimedJob;
  const replayed = await replayAgainstHistory(definition, parsed.data, job, run.steps, db);
  if ('fits' in replayed) return null;
  if ('changed' in replayed) return { sort: 'diverges', problem: describeChange(replayed.changed) };
  return { sort: 'fails', problem: { step: null, why: `its code throws: ${errorText(replayed.threw)}` } };
}

const describeChange = (change: WorkflowChange): { step: string; why: string } => ({
  step: change.step,
  why: change.message,
});
