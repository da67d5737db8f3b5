// Durable workflows side by side (npm run bench -- --only workflows): `runs` runs of a workflow of
// three steps and a 1 s sleep on pgdrain and on DBOS Transact, each in a process of its own on a
// database of its own on the same PostgreSQL, with each one's documented way of running many
// (pgdrain: enqueueMany and the sidecar's drainer; DBOS: a WorkflowQueue of the same concurrency).
// Also pgdrain's cost of a step: the same runs without the sleep next to as many plain jobs.
// Absurd (absurd-sdk) is not measured: its schema is installed by absurdctl, a Python tool that is
// not on npm, and this machine reaches no other registry.
import { spawn } from 'node:child_process';
import path from 'node:path';

export interface WorkflowTrial {
  runs: number;
  seconds: number;
  runsPerSecond: number;
  /** How late runs went on after their sleep, p50 and p99 (pgdrain with a sleep; else null). */
  wakeLateP50Ms?: number | null;
  wakeLateP99Ms?: number | null;
  /** PostgreSQL CPU over the trial (ms), when the caller can see it. */
  postgresCpuMs?: number;
}

const ROOT = path.resolve(import.meta.dirname, '..');

/** One trial of `system` in a child process; `cpu` reads PostgreSQL's CPU (ms) around it. */
/** How long one trial may take before it fails as hung. */
const TRIAL_LIMIT_MS = 600_000;

export async function workflowTrial(
  system: 'pgdrain' | 'dbos',
  url: string,
  runs: number,
  sleepSeconds: number,
  cpu: () => Promise<number>,
  /** DBOS: `direct` (startWorkflow, no queue) or `queue`; pgdrain: `fanout=N` (N children per run). */
  mode = '',
): Promise<WorkflowTrial> {
  const script = path.join(
    ROOT,
    'bench',
    'fixtures',
    system === 'pgdrain' ? 'workflow-pgdrain.ts' : 'workflow-dbos.ts',
  );
  const before = await cpu();
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, [script, url, String(runs), String(sleepSeconds), mode], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DBOS__APPVERSION: 'bench' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    // A run that waits for ever would hold the whole benchmark (and CI) until its own limit: a
    // trial that has not ended by then fails, saying so. The slowest full trial takes ~4 minutes.
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(
          `${system} workflow trial (${runs} runs${mode ? `, ${mode}` : ''}) did not end in ` +
            `${TRIAL_LIMIT_MS / 1000} s: a run waiting for ever?\n${stderr.slice(-2000)}`,
        ),
      );
    }, TRIAL_LIMIT_MS);
    child.on('exit', (code) => {
      clearTimeout(deadline);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${system} workflow trial exited ${code}:\n${stderr.slice(-2000)}`));
    });
  });
  const line = out
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) throw new Error(`${system} workflow trial printed no result:\n${out.slice(-2000)}`);
  return { ...(JSON.parse(line) as WorkflowTrial), postgresCpuMs: (await cpu()) - before };
}
