// GET /metrics: the queue as Prometheus text (exposition format 0.0.4). Every scrape is a fresh
// read of the database (the table is the truth; a Worker has no process to keep counters in), so
// this is a formatter rather than a metrics registry. prom-client, the usual Node choice, is built
// around a long-lived in-process registry and Node's cluster and v8 modules, which fit neither a
// Worker nor a per-scrape snapshot; the format itself is small and fully covered here.
import type { KindTotals, TableHealth } from '../queries/index.ts';
import type { QueueStats } from './contract.ts';

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

interface Family {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  samples: { labels: Record<string, string>; value: number }[];
}

/**
 * `kinds` lists every kind to report even at zero (the registered ones), so a series does not
 * vanish when its queue empties; kinds found only in the database are added.
 */
export function renderMetrics(
  stats: QueueStats,
  totals: Record<string, KindTotals>,
  registered: readonly string[],
  health?: TableHealth,
): string {
  const kinds = [...new Set([...registered, ...Object.keys(stats.kinds), ...Object.keys(totals)])].sort();
  const gauge = (name: string, help: string): Family => ({ name, help, type: 'gauge', samples: [] });
  const counter = (name: string, help: string): Family => ({ name, help, type: 'counter', samples: [] });
  const jobs = gauge(
    'pgdrain_jobs',
    'Jobs in the table by kind and status (completed jobs are deleted, see pgdrain_jobs_completed_total).',
  );
  const ready = gauge(
    'pgdrain_jobs_ready',
    'Pending jobs that are due now (the rest of pending waits for its run_at).',
  );
  const oldest = gauge(
    'pgdrain_oldest_ready_job_age_seconds',
    'How long the oldest ready job has waited past its run_at; 0 when none is ready.',
  );
  const completed = counter('pgdrain_jobs_completed_total', 'Jobs completed.');
  const failed = counter(
    'pgdrain_jobs_failed_total',
    'Failed attempts: a handler error or timeout, or a lock the reaper expired (retried or dead).',
  );
  const dead = counter('pgdrain_jobs_dead_total', 'Jobs that became dead (attempts spent or a permanent error).');
  const diverged = counter(
    'pgdrain_workflow_diverged_total',
    'Workflow runs held because a deploy changed their code where their recorded history says otherwise.',
  );

  for (const kind of kinds) {
    const s = stats.kinds[kind];
    const t = totals[kind];
    jobs.samples.push(
      { labels: { kind, status: 'pending' }, value: s?.pending ?? 0 },
      { labels: { kind, status: 'running' }, value: s?.running ?? 0 },
      { labels: { kind, status: 'dead' }, value: s?.dead ?? 0 },
    );
    ready.samples.push({ labels: { kind }, value: s?.ready ?? 0 });
    oldest.samples.push({ labels: { kind }, value: s?.oldestReadySeconds ?? 0 });
    completed.samples.push({ labels: { kind }, value: t?.completed ?? 0 });
    failed.samples.push({ labels: { kind }, value: t?.failed ?? 0 });
    dead.samples.push({ labels: { kind }, value: t?.dead ?? 0 });
    if (t?.diverged) diverged.samples.push({ labels: { kind }, value: t.diverged });
  }

  const families = [jobs, ready, oldest, completed, failed, dead, diverged, ...limitFamilies(stats)];
  if (health) families.push(...healthFamilies(health));
  return families.map(renderFamily).join('');
}

/** Each limit across drainers of each kind, and how much of it is in use (only kinds that have limits). */
function limitFamilies(stats: QueueStats): Family[] {
  const limit: Family = {
    name: 'pgdrain_kind_limit',
    help: 'A limit across every drainer: limit=global_concurrency|group_concurrency|rate (starts per period).',
    type: 'gauge',
    samples: [],
  };
  const used: Family = {
    name: 'pgdrain_kind_limit_in_use',
    help:
      'How much of the limit is in use: running jobs (global_concurrency), group keys with ready jobs ' +
      '(group_concurrency), starts in the current window (rate).',
    type: 'gauge',
    samples: [],
  };
  for (const [kind, s] of Object.entries(stats.kinds).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const l = s.limits;
    if (!l) continue;
    const add = (name: string, value: number, inUse: number) => {
      limit.samples.push({ labels: { kind, limit: name }, value });
      used.samples.push({ labels: { kind, limit: name }, value: inUse });
    };
    if (l.globalConcurrency) add('global_concurrency', l.globalConcurrency.limit, l.globalConcurrency.running);
    if (l.groupConcurrency) add('group_concurrency', l.groupConcurrency.limit, l.groupConcurrency.keysWaiting);
    if (l.rateLimit) add('rate', l.rateLimit.limit, l.rateLimit.startsInWindow);
  }
  return limit.samples.length > 0 ? [limit, used] : [];
}

/** What holds vacuum back, and what it has not cleaned yet (queries/table-health.ts). */
function healthFamilies(health: TableHealth): Family[] {
  const gauge = (name: string, help: string, value: number): Family => ({
    name,
    help,
    type: 'gauge',
    samples: [{ labels: {}, value }],
  });
  return [
    gauge(
      'pgdrain_oldest_snapshot_age_seconds',
      'How long the oldest open transaction holding a snapshot has run (vacuum cannot clean past it); 0 when none.',
      health.oldestSnapshotSeconds,
    ),
    gauge(
      'pgdrain_oldest_xmin_age_transactions',
      'Transactions since the oldest xmin held by a session, replication slot or prepared transaction.',
      health.oldestXminAge,
    ),
    gauge(
      'pgdrain_jobs_table_dead_tuples',
      'Dead row versions in the jobs table not yet removed by vacuum (every claim walks past their index entries).',
      health.deadTuples,
    ),
    gauge(
      'pgdrain_jobs_table_live_tuples',
      'Live rows in the jobs table, as the statistics last counted them.',
      health.liveTuples,
    ),
    {
      name: 'pgdrain_jobs_table_vacuums_total',
      help:
        'VACUUMs of the jobs table since the statistics were reset: by="manual" (a sidecar drainer, ' +
        'VACUUM_EVERY_JOBS, or an operator), by="autovacuum".',
      type: 'counter',
      samples: [
        { labels: { by: 'manual' }, value: health.vacuums.manual },
        { labels: { by: 'autovacuum' }, value: health.vacuums.autovacuum },
      ],
    },
  ];
}

function renderFamily(family: Family): string {
  let out = `# HELP ${family.name} ${escapeHelp(family.help)}\n# TYPE ${family.name} ${family.type}\n`;
  for (const sample of family.samples) {
    const labels = Object.entries(sample.labels)
      .map(([k, v]) => `${k}="${escapeLabelValue(v)}"`)
      .join(',');
    out += `${family.name}${labels ? `{${labels}}` : ''} ${formatValue(sample.value)}\n`;
  }
  return out;
}

/** Label values escape backslash, double quote and line feed; nothing else. */
function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return value > 0 ? '+Inf' : '-Inf';
  return String(value);
}
