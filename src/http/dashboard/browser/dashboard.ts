// The dashboard's browser script, served by the app at /dashboard/script.js. Strict TypeScript with
// the DOM's types, checked by `tsc` with the rest of the project; scripts/build-dashboard.mjs
// bundles it (esbuild, ~20 ms) into ../script.generated.ts before `npm start`, `npm test`, the
// package build and every wrangler command (wrangler.toml [build]). No framework: it reads the public
// HTTP API with the token the person typed (sessionStorage: this tab only), refreshes every few
// seconds while the tab is visible, and builds every element with textContent, so nothing from the
// database is ever parsed as HTML. The API's types come from the contract the server validates with.
import type {
  CancelAnswer,
  DeadDeleted,
  DeadRetried,
  Job,
  JobPage,
  KindList,
  JobSummary,
  QueueStats,
  ScheduleList,
  Throughput,
  WorkflowStep,
} from '../../contract.ts';

type State = 'ready' | 'delayed' | 'running' | 'dead' | 'waiting';
type Scope = 'enqueue' | 'read' | 'admin';
type FailureKind = 'network' | 'auth' | 'database' | 'http';
type BannerKind = 'error' | 'info' | 'action';

const TOKEN_KEY = 'pgdrain.token';
const STATES: readonly State[] = ['ready', 'delayed', 'running', 'dead', 'waiting'];
/** Jobs in these states can still be cancelled. */
const CANCELLABLE = new Set(['pending', 'running', 'waiting']);
const SVG_NS = 'http://www.w3.org/2000/svg';

const body = document.body;
const basePath = body.dataset.basePath ?? '';
const warnSeconds = Number(body.dataset.warnSeconds) || 60;
const refreshMs = (Number(body.dataset.refreshSeconds) || 5) * 1000;

/** The page's element with this id; the page and this script ship together, so a missing one is a bug. */
function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the dashboard page has no #${id}`);
  return node as T;
}
const table = (id: string) => byId<HTMLTableElement>(id);

let lastOk: Date | null = null;
let lastThroughput: Throughput | null = null;
let inFlight: Promise<void> | null = null;
let noticeTimer: ReturnType<typeof setTimeout> | undefined;
/** From the API's X-Pgdrain-Scope: 'read' makes the page read-only. */
let tokenScope: Scope | null = null;

const token = () => sessionStorage.getItem(TOKEN_KEY);

class ApiFailure extends Error {
  readonly kind: FailureKind;
  readonly status: number;
  readonly code: string;
  constructor(kind: FailureKind, status: number, code: string, message: string) {
    super(message);
    this.kind = kind;
    this.status = status;
    this.code = code;
  }
}

async function api<T>(method: string, path: string): Promise<T> {
  let response: Response;
  try {
    response = await fetch(basePath + path, {
      method,
      headers: { Authorization: `Bearer ${token()}`, Accept: 'application/json' },
      cache: 'no-store',
    });
  } catch {
    throw new ApiFailure('network', 0, 'network', 'The server does not answer.');
  }
  const scope = response.headers.get('X-Pgdrain-Scope');
  if (scope) tokenScope = scope as Scope;
  if (response.status === 204) return null as T;
  let data: unknown = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data as { error?: { code?: string; message?: string } } | null)?.error ?? {};
    // A token that cannot read (an enqueue-only one) cannot open the page at all.
    const refused = response.status === 401 || (response.status === 403 && method === 'GET');
    const kind: FailureKind = refused ? 'auth' : error.code === 'database_unavailable' ? 'database' : 'http';
    throw new ApiFailure(
      kind,
      response.status,
      error.code ?? `http_${response.status}`,
      error.message ?? `HTTP ${response.status}`,
    );
  }
  return data as T;
}

// --- views -----------------------------------------------------------------------------------------
function showLogin(message?: string): void {
  byId('view').hidden = true;
  byId('forget').hidden = true;
  byId('login').hidden = false;
  const note = byId('login-message');
  note.textContent = message ?? 'Enter the API token. It is kept in this browser tab only.';
  note.className = message ? 'refused' : 'muted';
  byId<HTMLInputElement>('token').focus();
}

function showBanner(text: string | null, kind: BannerKind = 'error'): void {
  const banner = byId('banner');
  clearTimeout(noticeTimer);
  if (!text) {
    banner.hidden = true;
    banner.textContent = '';
    banner.dataset.kind = '';
    return;
  }
  banner.textContent = text;
  banner.dataset.kind = kind;
  banner.className = kind === 'info' ? 'banner info' : 'banner';
  banner.hidden = false;
  // 'error' describes the connection and goes with the next good refresh; the outcome of an
  // action ('info', or 'action' when it was refused) stays a few seconds whatever happens.
  if (kind === 'info' || kind === 'action')
    noticeTimer = setTimeout(() => showBanner(null), kind === 'info' ? 5000 : 10000);
}

function handleFailure(failure: unknown): void {
  if (!(failure instanceof ApiFailure)) {
    showBanner(`The dashboard failed: ${failure instanceof Error ? failure.message : String(failure)}`);
    return;
  }
  if (failure.kind === 'auth') {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(`The token was refused (${failure.message}). Enter the API token again.`);
    return;
  }
  // Not a token problem: stay on the dashboard (last data dimmed, or dashes) and keep asking.
  byId('login').hidden = true;
  byId('view').hidden = false;
  byId('forget').hidden = false;
  const since = lastOk ? ` Showing the data from ${lastOk.toLocaleTimeString()}.` : '';
  if (failure.kind === 'database') {
    showBanner(`The database does not answer: ${failure.message}${since} Retrying every ${refreshMs / 1000} s.`);
    body.classList.add('stale');
  } else if (failure.kind === 'network') {
    showBanner(`The server does not answer.${since} Retrying every ${refreshMs / 1000} s.`);
    body.classList.add('stale');
  } else {
    showBanner(`${failure.message} (HTTP ${failure.status})`);
  }
}

// --- refresh ---------------------------------------------------------------------------------------
function refresh(): Promise<void> {
  if (!token()) {
    if (byId('login').hidden) showLogin();
    return Promise.resolve();
  }
  if (inFlight) return inFlight;
  // /stats first: one request tells whether the token works (a refused token costs one request,
  // not five), then the chart, the jobs of the chosen state, the dead jobs and the schedules together.
  const listed = byId<HTMLSelectElement>('jobs-status').value;
  inFlight = api<QueueStats>('GET', '/stats')
    .then((stats) =>
      Promise.all([
        stats,
        api<Throughput>('GET', '/stats/throughput?minutes=60'),
        api<JobPage>('GET', `/jobs?status=${encodeURIComponent(listed)}&limit=50`),
        api<JobPage>('GET', '/jobs?status=dead&limit=100'),
        api<ScheduleList>('GET', '/schedules'),
        api<KindList>('GET', '/kinds'),
      ]),
    )
    .then(([stats, throughput, jobs, dead, schedules, definitions]) => {
      // Visible first: the chart is drawn to the width its box has.
      byId('login').hidden = true;
      byId('view').hidden = false;
      byId('forget').hidden = false;
      renderStats(stats);
      renderSubscriptions(stats);
      lastThroughput = throughput;
      renderThroughput(throughput);
      renderJobs(jobs);
      renderDead(dead);
      renderSchedules(schedules);
      renderDefinitions(definitions);
      applyScope();
      // The job shown below the list follows it (a workflow's next step, its end).
      if (shownJob) void showJob(shownJob).catch(() => {});
      lastOk = new Date();
      byId('updated').textContent = `Updated ${lastOk.toLocaleTimeString()}`;
      body.classList.remove('stale');
      if (byId('banner').dataset.kind === 'error') showBanner(null);
    })
    .catch(handleFailure)
    .finally(() => {
      inFlight = null;
    });
  return inFlight;
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {},
  children: Node[] = [],
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.appendChild(child);
  return node;
}

const formatCount = (n: number) => Number(n).toLocaleString('en-US');

function formatAge(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function countCell(column: string, value: number, extraClass?: string): HTMLTableCellElement {
  return element('td', {
    class: `num${extraClass ? ` ${extraClass}` : ''}`,
    'data-col': column,
    'data-value': String(value),
    text: formatCount(value),
  });
}

/** The body rows of the table with this id, replaced. */
function fillTable(id: string, rows: HTMLTableRowElement[]): void {
  table(id).tBodies[0]!.replaceChildren(...rows);
}

/** A list's rows, its empty note when it has none, and (pages of jobs) how many it shows. */
function showList(
  id: 'kinds' | 'dead' | 'jobs',
  rows: HTMLTableRowElement[],
  page?: { nextCursor: string | null },
): void {
  fillTable(id, rows);
  byId(`${id}-empty`).hidden = rows.length > 0;
  (table(id).parentNode as HTMLElement).hidden = rows.length === 0;
  if (page)
    byId(`${id}-count`).textContent =
      rows.length === 0 ? '' : `(${page.nextCursor ? `newest ${rows.length}` : rows.length})`;
}

/** A button that acts on one job (the table's click handler runs its action). */
const jobButton = (action: string, id: string, text: string, danger = false) =>
  element('button', {
    type: 'button',
    ...(danger ? { class: 'danger' } : {}),
    'data-action': action,
    'data-id': id,
    text,
  });

/** A kind's limits across drainers and their use: `2/3 running · 7/10 starts per 1 s · 4 keys waiting (1 each)`. */
function describeLimits(limits: QueueStats['kinds'][string]['limits']): string | null {
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

/** After a deploy: a kind's runs held by a change of their code, and its runs per version. */
function deployNotes(s: QueueStats['kinds'][string]): HTMLElement[] {
  const notes: HTMLElement[] = [];
  if (s.held > 0)
    notes.push(
      element('div', {
        class: 'limits held',
        'data-col': 'held',
        title: 'Their code departs from their history: open one (Jobs, status waiting) to see why',
        text: `${formatCount(s.held)} held by a code change`,
      }),
    );
  if (s.versions) {
    const versions = Object.entries(s.versions).map(([v, n]) => `v${v} ${formatCount(n)}`);
    notes.push(
      element('div', { class: 'limits', 'data-col': 'versions', text: `by version: ${versions.join(' · ')}` }),
    );
  }
  return notes;
}

function renderStats(stats: QueueStats): void {
  const kinds = Object.keys(stats.kinds).sort();
  const totals: Record<State, number> = { ready: 0, delayed: 0, running: 0, dead: 0, waiting: 0 };
  let largest = 0;
  for (const kind of kinds) {
    const s = stats.kinds[kind]!;
    for (const state of STATES) totals[state] += s[state];
    largest = Math.max(
      largest,
      STATES.reduce((sum, state) => sum + s[state], 0),
    );
  }
  for (const state of STATES) {
    const cell = byId(`total-${state}`);
    cell.textContent = formatCount(totals[state]);
    cell.dataset.value = String(totals[state]);
  }
  const oldest = stats.oldestReadySeconds;
  byId('oldest-ready').textContent = oldest == null ? 'none ready' : formatAge(oldest);
  byId('oldest-card').classList.toggle('warn', oldest != null && oldest > warnSeconds);

  const rows = kinds.map((kind) => {
    const s = stats.kinds[kind]!;
    const bar = element('div', { class: 'bar', title: STATES.map((state) => `${state} ${s[state]}`).join(', ') });
    for (const state of STATES) {
      if (s[state] === 0) continue;
      const segment = element('span', { class: `${state}-bg` });
      segment.style.width = `${(100 * s[state]) / largest}%`;
      bar.appendChild(segment);
    }
    const age = s.oldestReadySeconds;
    const kindCell = element('td', { text: kind });
    if (s.paused) kindCell.appendChild(element('span', { class: 'paused-badge', text: 'paused' }));
    const limits = describeLimits(s.limits);
    if (limits) kindCell.appendChild(element('div', { class: 'limits', 'data-col': 'limits', text: limits }));
    for (const note of deployNotes(s)) kindCell.appendChild(note);
    return element('tr', { 'data-kind': kind, 'data-paused': String(Boolean(s.paused)) }, [
      kindCell,
      countCell('pending', s.pending, 'pending'),
      countCell('ready', s.ready),
      countCell('delayed', s.delayed),
      countCell('running', s.running),
      countCell('dead', s.dead),
      countCell('waiting', s.waiting, 'waiting'),
      element('td', {
        class: `num oldest${age != null && age > warnSeconds ? ' warn' : ''}`,
        text: age == null ? '–' : formatAge(age),
      }),
      element('td', { class: 'bars' }, [bar]),
      element('td', { class: 'actions' }, [
        element('button', {
          type: 'button',
          'data-action': s.paused ? 'resume' : 'pause',
          'data-kind': kind,
          title: s.paused
            ? `Let every drainer claim ${kind} again`
            : `Stop every drainer from claiming ${kind} (enqueueing still works)`,
          text: s.paused ? 'Resume' : 'Pause',
        }),
      ]),
    ]);
  });
  showList('kinds', rows);
}

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string>,
  text?: string,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The last hour's totals above the chart. */
function renderThroughputSummary(sum: { completed: number; failed: number; dead: number }): void {
  byId('throughput-summary').replaceChildren(
    element('strong', { id: 'sum-completed', 'data-value': String(sum.completed), text: formatCount(sum.completed) }),
    document.createTextNode(' completed, '),
    element('strong', { id: 'sum-failed', 'data-value': String(sum.failed), text: formatCount(sum.failed) }),
    document.createTextNode(' failed attempts, '),
    element('strong', { id: 'sum-dead', 'data-value': String(sum.dead), text: formatCount(sum.dead) }),
    document.createTextNode(' became dead in the last hour.'),
  );
}

/** One minute's bar: completed at the bottom, failed attempts stacked on it. */
function minuteBar(
  m: Throughput['minutes'][number],
  x: number,
  barWidth: number,
  top: number,
  plotHeight: number,
  scale: number,
) {
  const completedHeight = (plotHeight * m.completed) / scale;
  const failedHeight = (plotHeight * m.failed) / scale;
  const group = svg('g', {});
  const at = new Date(m.minute).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  group.appendChild(svg('title', {}, `${at}: ${m.completed} completed, ${m.failed} failed`));
  if (m.completed > 0) {
    group.appendChild(
      svg('rect', {
        class: 'completed',
        x: String(x),
        width: String(barWidth),
        y: String(top + plotHeight - completedHeight),
        height: String(completedHeight),
      }),
    );
  }
  if (m.failed > 0) {
    group.appendChild(
      svg('rect', {
        class: 'failed',
        x: String(x),
        width: String(barWidth),
        y: String(top + plotHeight - completedHeight - failedHeight),
        height: String(failedHeight),
      }),
    );
  }
  return group;
}

function renderThroughput(data: Throughput): void {
  const minutes = data.minutes;
  const sum = { completed: 0, failed: 0, dead: 0 };
  let peak = 0;
  for (const m of minutes) {
    sum.completed += m.completed;
    sum.failed += m.failed;
    sum.dead += m.dead;
    peak = Math.max(peak, m.completed + m.failed);
  }
  renderThroughputSummary(sum);

  const chart = byId('chart');
  const width = Math.max(280, chart.clientWidth - 16);
  const height = 180;
  const [left, right, top, bottom] = [44, 6, 8, 22];
  const plotWidth = width - left - right;
  const plotHeight = height - top - bottom;
  const scale = niceCeiling(peak);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: String(width), height: String(height) });
  for (const f of [0, 0.5, 1]) {
    const y = top + plotHeight * (1 - f);
    root.appendChild(
      svg('line', { class: 'grid', x1: String(left), x2: String(width - right), y1: String(y), y2: String(y) }),
    );
    root.appendChild(
      svg(
        'text',
        { class: 'axis', x: String(left - 6), y: String(y + 4), 'text-anchor': 'end' },
        formatCount(Math.round(scale * f)),
      ),
    );
  }
  const slot = plotWidth / Math.max(1, minutes.length);
  const barWidth = Math.max(1, slot - (slot > 4 ? 2 : 0));
  for (const [i, m] of minutes.entries())
    root.appendChild(minuteBar(m, left + i * slot, barWidth, top, plotHeight, scale));
  const ticks: [number, string, string][] = [
    [0, 'start', `−${minutes.length} min`],
    [0.5, 'middle', `−${Math.round(minutes.length / 2)} min`],
    [1, 'end', 'now'],
  ];
  for (const [f, anchor, label] of ticks) {
    root.appendChild(
      svg(
        'text',
        { class: 'axis', x: String(left + plotWidth * f), y: String(height - 6), 'text-anchor': anchor },
        label,
      ),
    );
  }
  chart.replaceChildren(root);
}

function niceCeiling(value: number): number {
  if (value <= 4) return 4;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}

function renderDead(page: JobPage): void {
  const now = Date.now();
  const rows = page.jobs.map((job) => {
    const created = new Date(job.createdAt);
    return element('tr', { 'data-job': job.id }, [
      element('td', { 'data-label': 'Job', text: `#${job.id}` }),
      element('td', { 'data-label': 'Kind', text: job.kind }),
      element('td', { class: 'num', 'data-label': 'Attempts', text: `${job.attempts} / ${job.maxAttempts}` }),
      element('td', { class: 'error', 'data-label': 'Last error' }, [
        element('code', { title: job.lastError ?? '', text: job.lastError ?? '–' }),
      ]),
      element('td', {
        'data-label': 'Age',
        title: `created ${created.toLocaleString()}`,
        text: formatAge((now - created.getTime()) / 1000),
      }),
      element('td', { class: 'actions' }, [
        jobButton('retry', job.id, 'Retry'),
        jobButton('delete', job.id, 'Delete', true),
      ]),
    ]);
  });
  showList('dead', rows, page);
  byId('dead-bulk').hidden = rows.length === 0;
}

/** JSON for a table cell: compact, cut to a few lines (the full text in its title). */
function jsonCell(value: unknown): HTMLElement {
  const text = JSON.stringify(value);
  return element('code', { title: text, text: text.length > 240 ? `${text.slice(0, 240)}…` : text });
}

/** What a job of the list shows beside its state: progress while it runs, its result once kept,
 * how many jobs it still waits for, or why it was stopped. */
function jobDetail(job: JobSummary): Node {
  if (job.status === 'waiting') {
    return document.createTextNode(
      job.waitingFor === null ? 'a workflow waiting on a step (open the job)' : `waits for ${job.waitingFor} more`,
    );
  }
  if (job.status === 'completed' && job.result !== null) return jsonCell(job.result);
  if (job.progress !== null) return jsonCell(job.progress);
  if (job.lastError) return element('code', { title: job.lastError, text: job.lastError });
  return document.createTextNode('–');
}

function renderJobs(page: JobPage): void {
  const now = Date.now();
  const rows = page.jobs.map((job) => {
    const stopping = job.status === 'running' && job.cancelRequested;
    const at = job.finishedAt ?? job.lockedAt ?? job.createdAt;
    const when = job.finishedAt ? 'finished' : job.lockedAt ? 'started' : 'created';
    return element('tr', { 'data-job': job.id, 'data-status': job.status }, [
      element('td', { 'data-label': 'Job' }, [
        element('button', {
          type: 'button',
          class: 'link',
          'data-show': job.id,
          title: 'Show this job (a workflow: its steps)',
          text: `#${job.id}`,
        }),
      ]),
      element('td', { 'data-label': 'Kind', text: job.kind }),
      element('td', { 'data-label': 'Status' }, [
        element('span', {
          class: `status${stopping ? ' cancelling' : ''}`,
          text: stopping ? 'cancelling' : job.status,
        }),
      ]),
      element('td', { class: 'detail', 'data-label': 'Detail', 'data-col': 'detail' }, [jobDetail(job)]),
      element('td', {
        'data-label': 'When',
        title: new Date(at).toLocaleString(),
        text: `${when} ${formatAge((now - Date.parse(at)) / 1000)} ago`,
      }),
      element(
        'td',
        { class: 'actions' },
        CANCELLABLE.has(job.status) && !stopping ? [jobButton('cancel', job.id, 'Cancel', true)] : [],
      ),
    ]);
  });
  showList('jobs', rows, page);
}

/** The job shown below the list (null: none), refreshed with the page. */
let shownJob: string | null = null;

/** One job in full: its fields, and a workflow's steps as a timeline (GET /jobs/:id). */
async function showJob(id: string): Promise<void> {
  shownJob = id;
  let job: Job;
  try {
    job = await api<Job>('GET', `/jobs/${id}`);
  } catch (failure) {
    if (failure instanceof ApiFailure && failure.status === 404) {
      byId('job-detail').hidden = true;
      shownJob = null;
      showBanner(`Job #${id} is gone (completed and deleted, or its keep ran out).`, 'action');
      return;
    }
    throw failure;
  }
  if (shownJob !== id) return;
  byId('job-title').textContent = `Job #${job.id} · ${job.kind} · ${job.status}`;
  const facts: [string, string][] = [
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['created', formatWhen(job.createdAt)],
    ['run at', formatWhen(job.runAt)],
    ['finished', formatWhen(job.finishedAt)],
  ];
  if (job.lastError) facts.push(['last error', job.lastError]);
  if (job.result !== null) facts.push(['result', JSON.stringify(job.result)]);
  if (job.waitingOn) facts.push(['waiting on', waitingText(job.waitingOn)]);
  const list = byId('job-facts');
  list.replaceChildren(
    ...facts.flatMap(([term, value]) => [element('dt', { text: term }), element('dd', { text: value })]),
  );
  const steps = job.steps ?? [];
  byId('job-steps').hidden = steps.length === 0;
  fillTable('steps', timelineRows(steps, Date.now()));
  byId('job-detail').hidden = false;
}

/** What a sleeping or waiting step waits for. */
function waitingText(step: WorkflowStep): string {
  if (step.status === 'sleeping') return `sleeping until ${formatWhen(step.wakeAt)}`;
  if (step.childId) return `job #${step.childId} (step ${step.name})`;
  return `event ${step.event} (${step.key})${
    step.match ? ` matching ${JSON.stringify(step.match)}` : ''
  }${step.wakeAt ? ` until ${formatWhen(step.wakeAt)}` : ''}`;
}

/** A workflow's steps in order, each with a bar from its start to its end (or now) on the run's span of time. */
function timelineRows(steps: readonly WorkflowStep[], now: number): HTMLTableRowElement[] {
  const start = Math.min(...steps.map((s) => Date.parse(s.startedAt)));
  const end = Math.max(now, ...steps.map((s) => Date.parse(s.finishedAt ?? s.startedAt)));
  const span = Math.max(1, end - start);
  return steps.map((step) => {
    const from = Date.parse(step.startedAt);
    const to = step.finishedAt ? Date.parse(step.finishedAt) : now;
    const bar = element('span', { class: `bar ${step.status}`, title: `${((to - from) / 1000).toFixed(3)} s` });
    // CSSOM, not a style attribute: the page's CSP allows no inline styles.
    bar.style.setProperty('margin-left', `${(((from - start) / span) * 100).toFixed(2)}%`);
    bar.style.setProperty('width', `${Math.max(0.5, ((to - from) / span) * 100).toFixed(2)}%`);
    const outcome =
      step.status === 'failed'
        ? element('code', {
            title: step.error ?? '',
            text: `${step.error ?? ''}${step.wakeAt ? ` (tries again at ${formatWhen(step.wakeAt)})` : ''}`,
          })
        : step.status === 'completed'
          ? jsonCell(step.result)
          : document.createTextNode(waitingText(step));
    return element('tr', { 'data-step': step.name, 'data-status': step.status }, [
      element('td', { 'data-label': 'Step', text: step.name }),
      element('td', { 'data-label': 'Status' }, [element('span', { class: 'status', text: step.status })]),
      element('td', { class: 'num', 'data-label': 'Tries', text: String(step.attempts) }),
      element('td', { 'data-label': 'Started', text: formatWhen(step.startedAt) }),
      element('td', { class: 'timeline', 'data-label': 'Timeline' }, [bar]),
      element('td', { class: 'detail', 'data-label': 'Result, error or what it waits for' }, [outcome]),
    ]);
  });
}

/** A read token sees everything and changes nothing: every action button is disabled, with why. */
function applyScope(): void {
  const readOnly = tokenScope === 'read';
  byId('readonly-note').hidden = !readOnly;
  for (const button of document.querySelectorAll<HTMLButtonElement>('button[data-action]')) {
    button.disabled = readOnly;
    if (readOnly)
      button.title = 'This token can only read (scope read): retry, delete, pause and cancel need an admin token.';
  }
}

function formatWhen(iso: string | null, none = '–'): string {
  if (!iso) return none;
  return new Date(iso).toLocaleString([], {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
}

/** Kinds subscribed to events (GET /stats' subscriptions). */
function renderSubscriptions(stats: QueueStats): void {
  const rows = (stats.subscriptions ?? []).map((s) =>
    element('tr', { 'data-subscription': `${s.event} ${s.kind}` }, [
      element('td', { text: s.event }),
      element('td', { text: s.kind }),
      element('td', { text: formatWhen(s.subscribedAt) }),
    ]),
  );
  fillTable('subscriptions', rows);
  byId('subscriptions-section').hidden = rows.length === 0;
}

/** Each kind's stored definition (GET /kinds): what an enqueue by its name gets, and who wrote it. */
function renderDefinitions(data: KindList): void {
  const rows = data.kinds.map((k) => {
    const options = Object.entries(k.options)
      .map(([key, value]) => `${key}: ${typeof value === 'object' ? JSON.stringify(value) : String(value)}`)
      .join(', ');
    return element('tr', { 'data-definition': k.kind }, [
      element('td', { text: k.kind }),
      element('td', { class: 'num', text: String(k.version) }),
      element('td', {}, [element('code', { text: options || '–' })]),
      element('td', { text: k.registeredHere ? `${k.writtenBy} (this drainer has it)` : k.writtenBy }),
      element('td', { text: formatWhen(k.writtenAt) }),
    ]);
  });
  fillTable('definitions', rows);
  byId('definitions-section').hidden = rows.length === 0;
}

function renderSchedules(data: ScheduleList): void {
  const rows = data.schedules.map((s) =>
    element('tr', { 'data-schedule': s.name }, [
      element('td', { text: s.name }),
      element('td', {}, [element('code', { text: s.cron }), document.createTextNode(` ${s.timezone}`)]),
      element('td', { text: s.kind }),
      element('td', { 'data-col': 'next', text: formatWhen(s.nextRunAt) }),
      element('td', { 'data-col': 'last', text: formatWhen(s.lastRunAt, 'never') }),
    ]),
  );
  fillTable('schedules', rows);
  byId('schedules-section').hidden = rows.length === 0;
}

// --- actions ---------------------------------------------------------------------------------------
/** Each action: the request it makes, an optional confirmation, and what to say when it worked. */
interface Action<T> {
  confirm?: (button: HTMLButtonElement) => string;
  run: (button: HTMLButtonElement) => Promise<T>;
  done: (button: HTMLButtonElement, result: T) => string;
}
const action = <T>(a: Action<T>) => a as Action<unknown>;
const idOf = (b: HTMLButtonElement) => b.dataset.id ?? '';
const kindOf = (b: HTMLButtonElement) => b.dataset.kind ?? '';

const ACTIONS: Record<string, Action<unknown>> = {
  retry: action({
    run: (b) => api('POST', `/jobs/${idOf(b)}/retry`),
    done: (b) => `Job #${idOf(b)} is pending again.`,
  }),
  cancel: action<CancelAnswer>({
    confirm: (b) => `Cancel job #${idOf(b)}? It will not run (again); a running handler is asked to stop.`,
    run: (b) => api('POST', `/jobs/${idOf(b)}/cancel`),
    done: (b, result) =>
      result.status === 'running'
        ? `Job #${idOf(b)} is being stopped: its handler is aborted and it ends cancelled.`
        : `Job #${idOf(b)} is cancelled.`,
  }),
  delete: action({
    confirm: (b) => `Delete dead job #${idOf(b)}? This cannot be undone.`,
    run: (b) => api('DELETE', `/jobs/${idOf(b)}`),
    done: (b) => `Job #${idOf(b)} was deleted.`,
  }),
  pause: action({
    run: (b) => api('POST', `/kinds/${encodeURIComponent(kindOf(b))}/pause`),
    done: (b) => `${kindOf(b)} is paused: no drainer claims it until it is resumed.`,
  }),
  resume: action({
    run: (b) => api('POST', `/kinds/${encodeURIComponent(kindOf(b))}/resume`),
    done: (b) => `${kindOf(b)} is resumed.`,
  }),
  'retry-all': action<DeadRetried>({
    confirm: () => 'Retry every dead job? They go back to pending with their attempts reset.',
    run: () => api('POST', '/jobs/retry-dead'),
    done: (_, result) =>
      `${result.retried} dead jobs are pending again${result.done ? '.' : '; more are left, click again.'}`,
  }),
  'delete-all': action<DeadDeleted>({
    confirm: () => 'Delete every dead job? This cannot be undone.',
    run: () => api('POST', '/jobs/delete-dead'),
    done: (_, result) =>
      `${result.deleted} dead jobs were deleted${result.done ? '.' : '; more are left, click again.'}`,
  }),
};

async function act(button: HTMLButtonElement): Promise<void> {
  const chosen = ACTIONS[button.dataset.action ?? ''];
  if (!chosen) return;
  if (chosen.confirm && !window.confirm(chosen.confirm(button))) return;
  const buttons = (button.parentNode as ParentNode).querySelectorAll('button');
  for (const b of buttons) b.disabled = true;
  try {
    const result = await chosen.run(button);
    showBanner(chosen.done(button, result), 'info');
  } catch (failure) {
    // A refused action (409: someone else retried it first; 404: already deleted) is news, not
    // a broken connection: say it and keep saying it past the refresh that follows.
    if (failure instanceof ApiFailure && failure.kind === 'http') showBanner(failure.message, 'action');
    else handleFailure(failure);
  }
  await refresh();
}

// A refresh already on its way asked for the previous state: ask again once it is back.
byId<HTMLSelectElement>('jobs-status').addEventListener(
  'change',
  () => void (inFlight ?? Promise.resolve()).then(refresh),
);

for (const id of ['dead', 'kinds', 'dead-bulk', 'jobs']) {
  byId(id).addEventListener('click', (event) => {
    const button = (event.target as Element | null)?.closest<HTMLButtonElement>('button[data-action]');
    if (button && !button.disabled) void act(button);
  });
}

byId('jobs').addEventListener('click', (event) => {
  const button = (event.target as Element | null)?.closest<HTMLButtonElement>('button[data-show]');
  if (button) void showJob(button.dataset.show!).catch(handleFailure);
});
byId('job-close').addEventListener('click', () => {
  shownJob = null;
  byId('job-detail').hidden = true;
});

byId<HTMLFormElement>('login').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = byId<HTMLInputElement>('token');
  const value = input.value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  input.value = '';
  void refresh();
});

byId('forget').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showBanner(null);
  showLogin();
});

let resizeTimer: ReturnType<typeof setTimeout> | undefined;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (lastThroughput) renderThroughput(lastThroughput);
  }, 150);
});

document.addEventListener('visibilitychange', () => {
  if (!document.hidden) void refresh();
});
setInterval(() => {
  if (!document.hidden) void refresh();
}, refreshMs);
void refresh();
