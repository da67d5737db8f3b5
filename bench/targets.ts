// The open performance targets (issue 39: the stock server; issue 44: performance round five), each
// read off one run's figures and printed beside its goal at the end of `npm run bench`, so a full run
// on each server is the whole check. A target whose rows the run did not measure (`--only`, or a
// row that failed) is left out, not marked met.

export interface TargetFigure {
  workload: string;
  system: string;
  median: number;
  /** A drain's CPU per job over its runs (µs): PostgreSQL's process tree, and the bench's process. */
  perJob?: { postgresMicros: number[]; nodeMicros: number[] };
}

export interface TargetRow {
  /** The issue(s) that set the target. */
  issue: '39' | '44' | '39, 44' | '71';
  target: string;
  figure: string;
  goal: string;
  met: boolean;
}

const k = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v >= 10 ? v.toFixed(0) : v.toFixed(2));
const x = (v: number) => `${v.toFixed(2)}×`;
const middle = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** The issue 44 figures of the previous round's Worker drain (jobs/s at 0, 10 and 30 ms RTT). */
const WORKER_DRAIN_BEFORE: Record<number, number> = { 0: 37_900, 10: 25_600, 30: 14_700 };
/** Issue 39: graphile-worker tuned's burst of 50k into an idle worker on Debian's 15 (the goal when
 * a run has no burst row of its own for it: `--only pgdrain`), and the plain drain of 50k at
 * 58885cd on the same server (another machine: `npm run bench:plain -- --against 58885cd --server
 * stock` compares the two in one run). */
const GRAPHILE_BURST_STOCK = 37_500;
const PLAIN_DRAIN_58885CD_STOCK = 55_400;

export function targetRows(figures: TargetFigure[], server: 'embedded' | 'stock'): TargetRow[] {
  const get = (workload: string, system = 'pgdrain') =>
    figures.find((f) => f.workload === workload && f.system === system)?.median;
  const rows: TargetRow[] = [];
  const add = (row: TargetRow | undefined) => {
    if (row && Number.isFinite(Number.parseFloat(row.figure))) rows.push(row);
  };
  const ratio = (issue: TargetRow['issue'], target: string, a?: number, b?: number, goal = 1.5, detail = '') => {
    if (a === undefined || b === undefined) return;
    add({
      issue,
      target,
      figure: `${x(a / b)} (${k(a)} / ${k(b)}${detail})`,
      goal: `≥ ${x(goal)}`,
      met: a / b >= goal,
    });
  };
  const tuned = 'graphile-worker tuned';

  ratio(
    '39',
    'drain 5k (after ANALYZE) against graphile-worker tuned',
    get('drain 5k (after ANALYZE)'),
    get('drain 5k (after ANALYZE)', tuned),
    1.0,
  );
  for (const w of [
    'drain 50k (after ANALYZE)',
    'drain 50k (no ANALYZE)',
    'drain 50k (churned)',
    'drain 50k, 1M dead rows',
  ])
    ratio(
      w === 'drain 50k (after ANALYZE)' ? '39, 44' : '44',
      `${w} against graphile-worker tuned`,
      get(w),
      get(w, tuned),
    );
  // Issue 71: what a job of the 50k drains costs PostgreSQL, and Node, against graphile-worker tuned.
  const perJob = (workload: string, system: string, of: 'postgresMicros' | 'nodeMicros') => {
    const runs = figures.find((f) => f.workload === workload && f.system === system)?.perJob?.[of];
    return runs && runs.length > 0 ? middle(runs) : undefined;
  };
  for (const w of [
    'drain 50k (after ANALYZE)',
    'drain 50k (no ANALYZE)',
    'drain 50k (churned)',
    'drain 50k, 1M dead rows',
  ])
    for (const [of, name, goal] of [
      ['postgresMicros', 'PostgreSQL', 0.5],
      ['nodeMicros', 'Node', 1.0],
    ] as const) {
      const [a, b] = [perJob(w, 'pgdrain', of), perJob(w, tuned, of)];
      if (a === undefined || b === undefined) continue;
      add({
        issue: '71',
        target: `${w}: ${name} CPU per job against graphile-worker tuned`,
        figure: `${x(a / b)} (${a.toFixed(1)} / ${b.toFixed(1)} µs)`,
        goal: `≤ ${x(goal)}`,
        met: a / b <= goal,
      });
    }
  {
    const [a, b] = [get('wake-up latency p99'), get('wake-up latency p99', tuned)];
    if (a !== undefined && b !== undefined)
      add({
        issue: '44',
        target: 'wake-up p99 against graphile-worker tuned (ms)',
        figure: `${a.toFixed(2)} against ${b.toFixed(2)}`,
        goal: '≤',
        met: a <= b,
      });
  }
  ratio(
    '44',
    "bulk enqueue 50k against the bare unnest (the article's design)",
    get('bulk enqueue 50k'),
    get('bulk enqueue 50k', "article's design"),
    1.0,
  );
  ratio(
    '44',
    'results kept against deleted at once',
    get('drain 50k, results kept'),
    get('drain 50k, results deleted at once'),
    0.9,
  );
  {
    // Issue 71 §3: eight drainers make a job cost PostgreSQL at most 1.2× what one does.
    const cpu = (processes: string) => get(`scale-out 20k, ${processes}: PostgreSQL CPU per job`);
    const [eight, one] = [cpu('8 processes'), cpu('1 process')];
    if (eight !== undefined && one !== undefined)
      add({
        issue: '71',
        target: 'scale-out: PostgreSQL CPU per job, 8 processes against 1',
        figure: `${x(eight / one)} (${eight.toFixed(1)} / ${one.toFixed(1)} µs)`,
        goal: '≤ 1.20×',
        met: eight / one <= 1.2,
      });
  }
  {
    const [four, one] = [
      get('drain 50k, 4 processes: PostgreSQL time per job'),
      get('drain 50k, 1 process: PostgreSQL time per job'),
    ];
    if (four !== undefined && one !== undefined)
      add({
        issue: '44',
        target: 'four processes: PostgreSQL time per job against one',
        figure: `${x(four / one)} (${four.toFixed(1)} / ${one.toFixed(1)} µs)`,
        goal: '≤ 1.30×',
        met: four / one <= 1.3,
      });
  }
  ratio(
    '44',
    "a fair kind's claims against plain ones, 1,000 keys",
    get('fair claims, 1.0k keys (20.0k jobs)', 'pgdrain fair'),
    get('fair claims, 1.0k keys (20.0k jobs)', 'pgdrain plain'),
    0.5,
  );
  {
    const perStep = get('workflows: PostgreSQL CPU per step (3 steps + the sleep)');
    if (perStep !== undefined)
      add({
        issue: '44',
        target: "a workflow step's PostgreSQL CPU (µs)",
        figure: perStep.toFixed(0),
        goal: '≤ 150',
        met: perStep <= 150,
      });
    const runs = get('workflows: 10k runs, 3 steps + 1 s sleep');
    if (runs !== undefined)
      add({
        issue: '44',
        target: 'workflows: 10k runs of 3 steps + a sleep (runs/s)',
        figure: k(runs),
        goal: '≥ 1.5k',
        met: runs >= 1500,
      });
  }
  for (const rtt of [0, 10, 30]) {
    const v = get(`worker drain, ${rtt} ms RTT`, 'pgdrain worker');
    const before = WORKER_DRAIN_BEFORE[rtt]!;
    if (v !== undefined)
      add({
        issue: '44',
        target: `the Worker's drain, ${rtt} ms RTT (jobs/s)`,
        figure: k(v),
        goal: `≥ ${k(before)}`,
        met: v >= before,
      });
  }
  {
    const cpu = get('worker CPU per 1,000 jobs, 10 ms RTT', 'pgdrain worker');
    if (cpu !== undefined)
      add({
        issue: '44',
        target: "the Worker's CPU per 1,000 jobs, 10 ms RTT (ms)",
        figure: cpu.toFixed(0),
        goal: '≤ 12',
        met: cpu <= 12,
      });
  }
  {
    const burst = get('drain 50k burst, one transaction, idle process');
    const tunedBurst = get('drain 50k burst, one transaction, idle process', tuned);
    if (burst !== undefined && tunedBurst !== undefined && server === 'stock')
      ratio('39', 'burst of 50k into an idle process against graphile-worker tuned', burst, tunedBurst, 1.0);
    else if (burst !== undefined && server === 'stock')
      add({
        issue: '39',
        target: 'burst of 50k into an idle process (jobs/s)',
        figure: k(burst),
        goal: `≥ ${k(GRAPHILE_BURST_STOCK)} (graphile-worker tuned, issue 39)`,
        met: burst >= GRAPHILE_BURST_STOCK,
      });
    const plain = get('plain drain 50k (the budget)');
    if (plain !== undefined && server === 'stock')
      add({
        issue: '39',
        target: 'the plain drain 50k (jobs/s)',
        figure: k(plain),
        goal: `≥ ${k(PLAIN_DRAIN_58885CD_STOCK)} (58885cd)`,
        met: plain >= PLAIN_DRAIN_58885CD_STOCK,
      });
  }
  for (const variant of ['groupConcurrency 1, one key', 'globalConcurrency 1', 'fair, groupConcurrency 1, one key']) {
    const gap = get(`serial kind (${variant}): gap p50`);
    if (gap !== undefined)
      add({
        issue: '39',
        target: `serial kind (${variant}): gap p50 (ms)`,
        figure: gap.toFixed(1),
        goal: '≤ 20',
        met: gap <= 20,
      });
  }
  {
    const late = get('workflows: 5.0k runs sleeping 5 s, late after the sleep p99');
    if (late !== undefined)
      add({
        issue: '39',
        target: '5,000 runs sleeping 5 s: late p99 (ms)',
        figure: late.toFixed(0),
        goal: '≤ 1,500',
        met: late <= 1500,
      });
    const jit = get("pgdrain's statements JIT-compiled");
    if (jit !== undefined)
      add({ issue: '39', target: "pgdrain's statements JIT-compiled", figure: String(jit), goal: '0', met: jit === 0 });
  }
  return rows;
}

/** Prints the rows as a Markdown table. A `--quick` run measures at smoke sizes (500 workflow runs,
 * 5k jobs), so its table is labelled a smoke and says nothing about the targets. */
export function printTargets(
  rows: TargetRow[],
  { smoke = false }: { smoke?: boolean } = {},
  log: (line: string) => void = console.log,
): void {
  if (rows.length === 0) return;
  const mark = (met: boolean) => (smoke ? (met ? 'smoke: met' : 'smoke: not met') : met ? 'met' : '**not met**');
  const table = [
    ['issue', 'target', 'figure', 'goal', 'met'],
    ...rows.map((r) => [r.issue, r.target, r.figure, r.goal, mark(r.met)]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  log(
    smoke
      ? '\nthe open targets (issues 39, 44 and 71) at smoke sizes (--quick): not a measurement of any target'
      : '\nthe open targets (issues 39, 44 and 71), this run:',
  );
  for (const [n, r] of table.entries()) {
    log(`| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`);
    if (n === 0) log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  }
}
