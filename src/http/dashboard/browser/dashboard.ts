// The dashboard's browser script, served by the app at /dashboard/script.js. Strict TypeScript with
// the DOM's types, checked by `tsc` with the rest of the project; scripts/build-dashboard.mjs
// bundles it (esbuild, ~20 ms) into ../script.generated.ts before `npm start`, `npm test`, the
// package build and every wrangler command (wrangler.toml [build]). No framework: it reads the public
// HTTP API with the token the person typed (sessionStorage: this tab only), refreshes every few
// seconds while the tab is visible, and builds every element with textContent, so nothing from the
// database is ever parsed as HTML. The API's types come from the contract the server validates with.
// Three pages, by the address's hash: the queue (#/), a job (#/jobs/:id: ./job-page.ts) and a kind
// (#/kinds/:kind: ./kind-page.ts); each refresh reads what the page shown needs.
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
} from '../../contract.ts';
import { ApiFailure, TOKEN_KEY, api, scope, token } from './api.ts';
import { renderThroughput } from './chart.ts';
import {
  byId,
  countCell,
  element,
  fillTable,
  formatAge,
  formatCount,
  formatWhen,
  jobLink,
  jsonCell,
  kindLink,
  table,
} from './dom.ts';
import { CANCELLABLE, jobButton, renderJobGone, renderJobPage } from './job-page.ts';
import { describeLimits, renderKindPage } from './kind-page.ts';

type State = 'ready' | 'delayed' | 'running' | 'dead' | 'waiting';
type BannerKind = 'error' | 'info' | 'action';

const STATES: readonly State[] = ['ready', 'delayed', 'running', 'dead', 'waiting'];

const body = document.body;
const warnSeconds = Number(body.dataset.warnSeconds) || 60;
const refreshMs = (Number(body.dataset.refreshSeconds) || 5) * 1000;
const QUEUE_CHART = { chart: 'chart', summary: 'throughput-summary', prefix: 'sum' };

let lastOk: Date | null = null;
let lastThroughput: Throughput | null = null;
let inFlight: Promise<void> | null = null;
let noticeTimer: ReturnType<typeof setTimeout> | undefined;

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

// --- pages and refresh -----------------------------------------------------------------------------
type Route = { page: 'queue' } | { page: 'job'; id: string } | { page: 'kind'; kind: string };

/** The page the address names: #/jobs/7, #/kinds/email, else the queue. */
function currentRoute(): Route {
  const job = /^#\/jobs\/([1-9]\d{0,18})$/.exec(location.hash);
  if (job) return { page: 'job', id: job[1]! };
  const kind = /^#\/kinds\/(.+)$/.exec(location.hash);
  if (kind) {
    try {
      return { page: 'kind', kind: decodeURIComponent(kind[1]!) };
    } catch {
      return { page: 'queue' };
    }
  }
  return { page: 'queue' };
}

/** The page and the view visible (before drawing: the chart is drawn to the width its box has). */
function showPage(route: Route): void {
  byId('login').hidden = true;
  byId('view').hidden = false;
  byId('forget').hidden = false;
  byId('queue-page').hidden = route.page !== 'queue';
  byId('job-page').hidden = route.page !== 'job';
  byId('kind-page').hidden = route.page !== 'kind';
}

/** The filters the jobs list was last searched with (the status has its own select). */
let searched: Record<string, string> = {};

function jobsQuery(): string {
  const params = new URLSearchParams({ limit: '50', ...searched });
  const status = byId<HTMLSelectElement>('jobs-status').value;
  if (status) params.set('status', status);
  return params.toString();
}

/** The queue: /stats first (one request tells whether the token works: a refused token costs one
 * request, not six), then the chart, the jobs listed, the dead jobs, schedules and kinds together. */
async function loadQueue(route: Route): Promise<void> {
  const stats = await api<QueueStats>('GET', '/stats');
  const [throughput, jobs, dead, schedules, definitions] = await Promise.all([
    api<Throughput>('GET', '/stats/throughput?minutes=60'),
    api<JobPage>('GET', `/jobs?${jobsQuery()}`),
    api<JobPage>('GET', '/jobs?status=dead&limit=100'),
    api<ScheduleList>('GET', '/schedules'),
    api<KindList>('GET', '/kinds'),
  ]);
  showPage(route);
  renderStats(stats);
  renderSubscriptions(stats);
  lastThroughput = throughput;
  renderThroughput(throughput, QUEUE_CHART);
  renderJobs(jobs);
  renderDead(dead);
  renderSchedules(schedules);
  renderDefinitions(definitions);
}

/** A job's page, following it at each refresh (a workflow's next step, its end). */
async function loadJob(route: Route & { page: 'job' }): Promise<void> {
  let job: Job | null = null;
  try {
    job = await api<Job>('GET', `/jobs/${route.id}`);
  } catch (failure) {
    if (!(failure instanceof ApiFailure && failure.status === 404)) throw failure;
  }
  showPage(route);
  if (job) renderJobPage(job);
  else renderJobGone(route.id);
}

async function loadKind(route: Route & { page: 'kind' }): Promise<void> {
  const stats = await api<QueueStats>('GET', '/stats');
  const kind = encodeURIComponent(route.kind);
  const [throughput, definitions, schedules, jobs] = await Promise.all([
    api<Throughput>('GET', `/stats/throughput?minutes=60&kind=${kind}`),
    api<KindList>('GET', '/kinds'),
    api<ScheduleList>('GET', '/schedules'),
    api<JobPage>('GET', `/jobs?kind=${kind}&limit=20`),
  ]);
  showPage(route);
  renderKindPage({ kind: route.kind, stats, definitions, schedules, throughput, jobs });
}

function refresh(): Promise<void> {
  if (!token()) {
    if (byId('login').hidden) showLogin();
    return Promise.resolve();
  }
  if (inFlight) return inFlight;
  const route = currentRoute();
  const load = route.page === 'job' ? loadJob(route) : route.page === 'kind' ? loadKind(route) : loadQueue(route);
  inFlight = load
    .then(() => {
      applyScope();
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
    const kindCell = element('td', {}, [kindLink(kind)]);
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

function renderDead(page: JobPage): void {
  const now = Date.now();
  const rows = page.jobs.map((job) => {
    const created = new Date(job.createdAt);
    return element('tr', { 'data-job': job.id }, [
      element('td', { 'data-label': 'Job' }, [jobLink(job.id)]),
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
      element('td', { 'data-label': 'Job' }, [jobLink(job.id)]),
      element('td', { 'data-label': 'Kind' }, [kindLink(job.kind)]),
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

/** A read token sees everything and changes nothing: every action button is disabled, with why. */
function applyScope(): void {
  const readOnly = scope() === 'read';
  byId('readonly-note').hidden = !readOnly;
  for (const button of document.querySelectorAll<HTMLButtonElement>('button[data-action]')) {
    button.disabled = readOnly;
    if (readOnly)
      button.title = 'This token can only read (scope read): retry, delete, pause and cancel need an admin token.';
  }
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
      element('td', {}, [kindLink(k.kind)]),
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
      element('td', {}, [kindLink(s.kind)]),
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
  'retry-from-step': action({
    confirm: (b) =>
      `Run job #${idOf(b)} again from step ${b.dataset.step}? That step and every later one run again; ` +
      'the earlier ones keep their results.',
    run: (b) => api('POST', `/jobs/${idOf(b)}/retry`, { fromStep: b.dataset.step }),
    done: (b) => `Job #${idOf(b)} runs again from step ${b.dataset.step}.`,
  }),
  delete: action({
    confirm: (b) => `Delete job #${idOf(b)}? This cannot be undone.`,
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

for (const id of ['dead', 'kinds', 'dead-bulk', 'jobs', 'job-page', 'kind-page']) {
  byId(id).addEventListener('click', (event) => {
    const button = (event.target as Element | null)?.closest<HTMLButtonElement>('button[data-action]');
    if (button && !button.disabled) void act(button);
  });
}

// Another page: shown at once from what is known, then read.
window.addEventListener('hashchange', () => {
  // What an action or a search said belongs to the page it was on.
  if (byId('banner').dataset.kind !== 'error') showBanner(null);
  const route = currentRoute();
  // Nothing of the job or kind shown before stays while the new one is read.
  if (route.page === 'job') {
    byId('job-title').textContent = `Job #${route.id}`;
    byId('job-detail').hidden = true;
    byId('job-gone').hidden = true;
  }
  if (route.page === 'kind') {
    byId('kind-title').textContent = `Kind ${route.kind}`;
    byId('kind-detail').hidden = true;
  }
  showPage(route);
  void (inFlight ?? Promise.resolve()).then(refresh);
});

byId<HTMLFormElement>('job-search').addEventListener('submit', (event) => {
  event.preventDefault();
  const value = (id: string) => byId<HTMLInputElement>(id).value.trim();
  const id = value('search-id');
  if (id) {
    if (/^[1-9]\d{0,18}$/.test(id)) location.hash = `#/jobs/${id}`;
    else showBanner(`"${id}" is not a job id: a job id is a positive whole number.`, 'action');
    return;
  }
  const payload = value('search-payload');
  if (payload && !isJsonObject(payload)) {
    showBanner('Payload contains: write a JSON object, such as {"orderId": 42}.', 'action');
    return;
  }
  const fields = {
    kind: 'search-kind',
    dedupeKey: 'search-dedupe',
    groupKey: 'search-group',
    payload: 'search-payload',
  };
  searched = Object.fromEntries(
    Object.entries(fields)
      .map(([name, input]) => [name, value(input)])
      .filter(([, v]) => v),
  );
  void (inFlight ?? Promise.resolve()).then(refresh);
});
byId('search-clear').addEventListener('click', () => {
  byId<HTMLFormElement>('job-search').reset();
  searched = {};
  void (inFlight ?? Promise.resolve()).then(refresh);
});

function isJsonObject(text: string): boolean {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value);
  } catch {
    return false;
  }
}

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
    if (lastThroughput) renderThroughput(lastThroughput, QUEUE_CHART);
  }, 150);
});

document.addEventListener('visibilitychange', () => {
  if (!document.hidden) void refresh();
});
setInterval(() => {
  if (!document.hidden) void refresh();
}, refreshMs);
void refresh();
