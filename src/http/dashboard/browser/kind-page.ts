// One kind's page (#/kinds/:kind): its counts by state, its limits across drainers and their use,
// its definition as the drainers wrote it, its schedules and the events that start it, its last
// hour of throughput, and its newest jobs — each a link to the job's page.
import type { JobPage, KindList, QueueStats, ScheduleList, Throughput } from '../../contract.ts';
import { renderThroughput } from './chart.ts';
import { byId, element, fillTable, formatAge, formatCount, formatWhen, jobLink } from './dom.ts';

export interface KindPageData {
  kind: string;
  stats: QueueStats;
  definitions: KindList;
  schedules: ScheduleList;
  throughput: Throughput;
  jobs: JobPage;
}

const COUNTED = ['ready', 'delayed', 'running', 'waiting', 'dead'] as const;

/** A kind's limits across drainers and their use: `2/3 running · 7/10 starts per 1 s · 4 keys waiting (1 each)`. */
export function describeLimits(limits: QueueStats['kinds'][string]['limits']): string | null {
  if (!limits) return null;
  const parts: string[] = [];
  if (limits.globalConcurrency)
    parts.push(`${limits.globalConcurrency.running}/${limits.globalConcurrency.limit} running`);
  if (limits.rateLimit) {
    const r = limits.rateLimit;
    parts.push(`${r.startsInWindow}/${r.limit} starts per ${r.periodSeconds} s${r.perGroup ? ' per key' : ''}`);
  }
  if (limits.groupConcurrency)
    parts.push(`${limits.groupConcurrency.keysWaiting} keys waiting (${limits.groupConcurrency.limit} each)`);
  if (limits.fair) parts.push('keys take turns');
  if (limits.groupOverrides)
    parts.push(
      `${limits.groupOverrides.count} key${limits.groupOverrides.count === 1 ? '' : 's'} with limits of their own`,
    );
  return parts.join(' · ');
}

export function renderKindPage(data: KindPageData): void {
  const { kind } = data;
  const stats = data.stats.kinds[kind];
  byId('kind-title').textContent = `Kind ${kind}`;
  byId('kind-detail').hidden = false;
  byId('kind-counts').replaceChildren(
    ...COUNTED.map((state) =>
      element('div', { class: `card ${state}` }, [
        element('span', { class: 'label', text: state }),
        element('span', {
          class: 'value',
          id: `kind-${state}`,
          'data-value': String(stats?.[state] ?? 0),
          text: formatCount(stats?.[state] ?? 0),
        }),
      ]),
    ),
  );
  const oldest = stats?.oldestReadySeconds;
  const notes = [
    stats?.paused ? 'Paused: no drainer claims it until it is resumed.' : null,
    oldest != null ? `Its oldest ready job has waited ${formatAge(oldest)}.` : null,
    describeLimits(stats?.limits) ? `Limits: ${describeLimits(stats?.limits)}.` : 'No limits across drainers.',
    stats?.held ? `${stats.held} runs held by a code change.` : null,
  ].filter((n): n is string => n !== null);
  byId('kind-notes').replaceChildren(...notes.map((n) => element('li', { text: n })));
  byId('kind-actions').replaceChildren(
    element('button', {
      type: 'button',
      'data-action': stats?.paused ? 'resume' : 'pause',
      'data-kind': kind,
      text: stats?.paused ? 'Resume' : 'Pause',
    }),
  );
  renderDefinition(data);
  renderKindSchedules(data);
  renderThroughput(data.throughput, { chart: 'kind-chart', summary: 'kind-throughput-summary', prefix: 'kind-sum' });
  renderKindJobs(data.jobs);
}

function renderDefinition({ kind, definitions, stats }: KindPageData): void {
  const definition = definitions.kinds.find((k) => k.kind === kind);
  const facts: [string, string][] = definition
    ? [
        ['version', String(definition.version)],
        ...Object.entries(definition.options).map(([name, value]): [string, string] => [
          name,
          typeof value === 'object' ? JSON.stringify(value) : String(value),
        ]),
        ['written by', `${definition.writtenBy}${definition.registeredHere ? ' (this drainer has it)' : ''}`],
        ['written', formatWhen(definition.writtenAt)],
      ]
    : [['definition', 'no drainer has written it (jobs of it wait for one that has the kind)']];
  const subscriptions = (stats.subscriptions ?? []).filter((s) => s.kind === kind);
  for (const s of subscriptions) facts.push(['started by event', `${s.event} (since ${formatWhen(s.subscribedAt)})`]);
  byId('kind-definition').replaceChildren(
    ...facts.flatMap(([term, value]) => [element('dt', { text: term }), element('dd', { text: value })]),
  );
}

function renderKindSchedules({ kind, schedules }: KindPageData): void {
  const rows = schedules.schedules
    .filter((s) => s.kind === kind)
    .map((s) =>
      element('tr', { 'data-schedule': s.name }, [
        element('td', { text: s.name }),
        element('td', {}, [element('code', { text: s.cron }), document.createTextNode(` ${s.timezone}`)]),
        element('td', { text: formatWhen(s.nextRunAt) }),
        element('td', { text: formatWhen(s.lastRunAt, 'never') }),
      ]),
    );
  fillTable('kind-schedules', rows);
  byId('kind-schedules-box').hidden = rows.length === 0;
}

function renderKindJobs(page: JobPage): void {
  const rows = page.jobs.map((job) =>
    element('tr', { 'data-job': job.id, 'data-status': job.status }, [
      element('td', {}, [jobLink(job.id)]),
      element('td', {}, [element('span', { class: 'status', text: job.status })]),
      element('td', { class: 'num', text: `${job.attempts} / ${job.maxAttempts}` }),
      element('td', { class: 'detail' }, [element('code', { text: job.payloadPreview ?? '(large payload)' })]),
      element('td', { text: formatWhen(job.createdAt) }),
    ]),
  );
  fillTable('kind-jobs', rows);
  byId('kind-jobs-empty').hidden = rows.length > 0;
}
