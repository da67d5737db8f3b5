// `pgdrain workflows check --jobs FILE [--json]`: every workflow run in flight replayed against the
// module's definitions before they are deployed (workflows/check.ts), nothing run or written. Prints
// each run that would diverge or fail and the counts per kind; exit 1 when any would, so it can gate
// a deploy in CI.
import type { Db } from '../queries/index.ts';
import { loadJobsModule } from '../sidecar/jobs-module.ts';
import { type WorkflowCheckReport, checkWorkflows } from '../workflows/check.ts';

/** Runs the check of the module at `modulePath`; `out` prints; returns whether the deploy may go on. */
export async function checkWorkflowsCommand(
  db: Db,
  modulePath: string,
  { json, out }: { json: boolean; out: (text: string) => void },
): Promise<{ ok: boolean; summary: string }> {
  const { jobs } = await loadJobsModule(modulePath);
  const report = await checkWorkflows(db, jobs);
  if (json) out(JSON.stringify(report));
  else for (const line of reportLines(report)) out(line);
  const bad = report.diverges.length + report.fails.length;
  const counts = Object.values(report.kinds).reduce(
    (sum, k) => ({ diverges: sum.diverges + k.diverges, fails: sum.fails + k.fails }),
    { diverges: 0, fails: 0 },
  );
  return {
    ok: bad === 0,
    summary: `${counts.diverges} run(s) would diverge and ${counts.fails} would fail on these definitions`,
  };
}

function reportLines(report: WorkflowCheckReport): string[] {
  const lines = [`Checked ${report.checked} workflow run(s) in flight.`];
  for (const [kind, k] of Object.entries(report.kinds).sort(([a], [b]) => (a < b ? -1 : 1)))
    lines.push(`  ${kind}: ${k.checked} checked, ${k.diverges} would diverge, ${k.fails} would fail`);
  for (const p of report.diverges)
    lines.push(`diverges: job ${p.id} (${p.kind} version ${p.version}, ${p.status}) at step '${p.step}': ${p.why}`);
  for (const p of report.fails)
    lines.push(`fails: job ${p.id} (${p.kind} version ${p.version}, ${p.status}): ${p.why}`);
  for (const u of report.unclaimable)
    lines.push(
      `unclaimable: ${u.runs} run(s) of ${u.kind} version ${u.version}: these definitions do not have that ` +
        'version; keep it registered until they finish',
    );
  return lines;
}
