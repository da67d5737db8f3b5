// The dashboard's page: rendered on the server with Hono's html helper (auto-escaping, no build
// step, so the sidecar runs it straight from the .ts source and the Worker bundles it as is; JSX
// syntax would need a transform that Node's type stripping does not do). The page holds no data:
// the browser asks for the API token once, keeps it in sessionStorage (this tab only), and the
// script (./browser/dashboard.ts) reads the same HTTP API anyone else would.
import { html, raw } from 'hono/html';

/** The page's icon: a blue rounded square, inline (the page loads nothing it does not serve). */
const FAVICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E" +
  "%3Crect width='16' height='16' rx='3' fill='%232f6fdf'/%3E%3C/svg%3E";
const READ_ONLY_NOTE =
  'Read-only: this token can read the queue but not change it. Retry, delete, pause and cancel need an admin token.';
const COUNTS_OFF_NOTE = raw(
  'Counting is off (<code>RECORD_COUNTS=false</code>): this chart only shows what was counted before.',
);

export interface DashboardPageOptions {
  /** The oldest ready job's age turns to a warning colour past this. */
  oldestReadyWarnSeconds: number;
  /** Seconds between refreshes. */
  refreshSeconds: number;
  /** False when the drainer does not count settled jobs (RECORD_COUNTS=false). */
  countsRecorded: boolean;
  /** Where the app is mounted ('' at the root, '/queue' when mounted there): assets and API calls
   * are made under it. */
  basePath: string;
}

const STATES = [
  ['ready', 'Ready', 'due now'],
  ['delayed', 'Delayed', 'waiting for run_at'],
  ['running', 'Running', 'claimed by a worker'],
  ['dead', 'Dead', 'needs a person'],
  ['waiting', 'Waiting', 'for other jobs, or a workflow step'],
] as const;

/** The statuses the jobs list can show: running first (its progress), then the rest of a job's life. */
const LISTED = [
  ['running', 'Running'],
  ['waiting', 'Waiting (other jobs, workflow steps)'],
  ['pending', 'Pending'],
  ['dead', 'Dead'],
  ['completed', 'Completed (kinds that keep them)'],
  ['cancelled', 'Cancelled (kinds that keep them)'],
  ['', 'Any status'],
] as const;

/** Find a job: by its id (opens its page), or list those matching every field given. */
const SEARCH = [
  ['search-id', 'Job id', 'numeric', '1234'],
  ['search-kind', 'Kind', 'text', 'email'],
  ['search-dedupe', 'Dedupe key', 'text', ''],
  ['search-group', 'Group key', 'text', ''],
  ['search-payload', 'Payload contains', 'text', '{"orderId": 42}'],
] as const;

/** The page: its head, the token form, and the view of the queue (filled in by the script). */
export function dashboardPage(options: DashboardPageOptions) {
  return html`${pageHead(options)}
<body data-base-path="${options.basePath}" data-warn-seconds="${options.oldestReadyWarnSeconds}"
  data-refresh-seconds="${options.refreshSeconds}">
${topAndLogin()}
<main id="view" hidden>
  <p id="readonly-note" class="banner info" hidden>${READ_ONLY_NOTE}</p>
  <div id="queue-page">
${totalsAndKinds(options)}
${throughputSection(options)}
${jobsSections()}
  </div>
${jobPage()}
${kindPage(options)}
</main>
</body>
</html>
`;
}

function pageHead(options: DashboardPageOptions) {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>pgdrain</title>
<link rel="icon" href="${FAVICON}">
<link rel="stylesheet" href="${options.basePath}/dashboard/style.css">
<script src="${options.basePath}/dashboard/script.js" defer></script>
</head>`;
}

function topAndLogin() {
  return html`<header class="top">
  <h1>pgdrain</h1>
  <span id="updated" class="muted" aria-live="polite"></span>
  <button id="forget" class="link" type="button" hidden>Forget token</button>
</header>
<div id="banner" class="banner" role="alert" hidden></div>

<form id="login" class="login" hidden>
  <h2>Open the dashboard</h2>
  <p id="login-message" class="muted">Enter the API token. It is kept in this browser tab only.</p>
  <label for="token">API token</label>
  <div class="row">
    <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required>
    <button type="submit">Open</button>
  </div>
</form>`;
}

function totalsAndKinds(options: DashboardPageOptions) {
  return html`  <section class="cards" aria-label="Totals">
    ${STATES.map(
      ([key, label, hint]) =>
        html`<div class="card ${key}"><span class="label">${label}</span>
          <span class="value" id="total-${key}">–</span><span class="hint">${hint}</span></div>`,
    )}
    <div class="card age" id="oldest-card"><span class="label">Oldest ready job</span>
      <span class="value" id="oldest-ready">–</span>
      <span class="hint">warning past ${options.oldestReadyWarnSeconds} s</span></div>
  </section>

  <section>
    <h2>By kind</h2>
    <div class="scroll">
      <table id="kinds">
        <thead><tr><th>Kind</th><th class="num pending">Pending</th><th class="num">Ready</th>
          <th class="num">Delayed</th><th class="num">Running</th><th class="num">Dead</th>
          <th class="num waiting">Waiting</th><th class="num oldest">Oldest ready</th><th class="bars">Backlog</th>
          <th><span class="sr">Actions</span></th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
    <p id="kinds-empty" class="muted" hidden>The queue is empty.</p>
    <p class="legend">${STATES.map(([key, label]) => html`<span class="swatch ${key}"></span>${label} `)}</p>
  </section>`;
}

function throughputSection(options: DashboardPageOptions) {
  return html`  <section>
    <h2>Throughput, last hour</h2>
    ${options.countsRecorded ? '' : html`<p id="counts-off" class="banner info">${COUNTS_OFF_NOTE}</p>`}
    <p id="throughput-summary" class="muted"></p>
    <div id="chart" class="chart" role="img" aria-label="Jobs completed and failed per minute over the last hour"></div>
    <p class="legend"><span class="swatch completed"></span>Completed
      <span class="swatch failed"></span>Failed attempts</p>
  </section>`;
}

function jobsSections() {
  return html`  <section>
    <h2>Jobs <span id="jobs-count" class="muted"></span></h2>
    <form id="job-search" class="search" role="search">
      <label>Status <select id="jobs-status">${LISTED.map(
        ([value, label]) => html`<option value="${value}">${label}</option>`,
      )}</select></label>
      ${SEARCH.map(
        ([id, label, mode, example]) =>
          html`<label>${label} <input id="${id}" inputmode="${mode}" placeholder="${example}" autocomplete="off"
            spellcheck="false"></label>`,
      )}
      <span class="buttons"><button type="submit">Find</button>
        <button id="search-clear" type="button" class="link">Clear</button></span>
    </form>
    <div class="scroll">
      <table id="jobs">
        <thead><tr><th>Job</th><th>Kind</th><th>Status</th><th>Progress or result</th><th>When</th>
          <th><span class="sr">Actions</span></th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
    <p id="jobs-empty" class="muted" hidden>No jobs match.</p>
  </section>

  <section>
    <h2>Dead jobs <span id="dead-count" class="muted"></span></h2>
    <p id="dead-bulk" class="bulk" hidden>
      <button id="retry-all" type="button" data-action="retry-all">Retry all dead jobs</button>
      <button id="delete-all" type="button" class="danger" data-action="delete-all">Delete all dead jobs</button>
    </p>
    <div class="scroll">
      <table id="dead">
        <thead><tr><th>Job</th><th>Kind</th><th class="num">Attempts</th><th>Last error</th><th>Age</th>
          <th><span class="sr">Actions</span></th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
    <p id="dead-empty" class="muted" hidden>No dead jobs.</p>
  </section>

  <section id="schedules-section" hidden>
    <h2>Schedules</h2>
    <div class="scroll">
      <table id="schedules">
        <thead><tr><th>Name</th><th>When</th><th>Kind</th><th>Next run</th><th>Last enqueued</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </section>

  <section id="definitions-section" hidden>
    <h2>Kinds as the drainers define them</h2>
    <div class="scroll">
      <table id="definitions">
        <thead><tr><th>Kind</th><th>Version</th><th>Options</th><th>Written by</th><th>When</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </section>

  <section id="subscriptions-section" hidden>
    <h2>Events that start work</h2>
    <div class="scroll">
      <table id="subscriptions">
        <thead><tr><th>Event</th><th>Subscribed kind</th><th>Since</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </section>`;
}

/** One job's page (#/jobs/:id), filled in by ./browser/job-page.ts. */
function jobPage() {
  return html`<div id="job-page" class="page" hidden>
  <p class="crumbs"><a id="job-close" href="#/">← The queue</a></p>
  <h2 id="job-title"></h2>
  <p id="job-gone" class="banner info" hidden></p>
  <div id="job-detail" class="job-detail">
    <p id="job-why" class="why"></p>
    <p id="job-actions" class="actions"></p>
    <dl id="job-facts"></dl>
    <h3>Payload</h3>
    <pre id="job-payload" class="json"></pre>
    <h3>Attempts</h3>
    <p id="attempts-empty" class="muted" hidden>No attempt yet.</p>
    <div id="attempts-box" class="scroll">
      <table id="attempts">
        <thead><tr><th class="num">#</th><th>Outcome</th><th>Started</th><th>Ended</th><th class="num">Took</th>
          <th>Drainer</th><th>Error</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
    <p id="attempts-note" class="muted"></p>
    <div hidden><h3>Runs after</h3><ul id="job-depends-on" class="links"></ul></div>
    <div hidden><h3>Waited for by</h3><ul id="job-dependents" class="links"></ul></div>
    <div id="job-steps" hidden>
      <h3>Workflow steps</h3>
      <div class="scroll">
        <table id="steps">
          <thead><tr><th>Step</th><th>Status</th><th class="num">Tries</th><th>Started</th><th class="num">Took</th>
            <th>Timeline</th><th>Result, error or what it waits for</th>
            <th><span class="sr">Actions</span></th></tr></thead>
          <tbody></tbody>
        </table>
      </div>
    </div>
  </div>
</div>`;
}

/** One kind's page (#/kinds/:kind), filled in by ./browser/kind-page.ts. */
function kindPage(options: DashboardPageOptions) {
  return html`<div id="kind-page" class="page" hidden>
  <p class="crumbs"><a href="#/">← The queue</a></p>
  <h2 id="kind-title"></h2>
  <div id="kind-detail" hidden>
  <section class="cards" id="kind-counts" aria-label="Its jobs by state"></section>
  <ul id="kind-notes" class="notes"></ul>
  <p id="kind-actions" class="actions"></p>
  <h3>Definition</h3>
  <dl id="kind-definition" class="facts"></dl>
  <div id="kind-schedules-box" hidden>
    <h3>Schedules</h3>
    <div class="scroll">
      <table id="kind-schedules">
        <thead><tr><th>Name</th><th>When</th><th>Next run</th><th>Last enqueued</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </div>
  <h3>Throughput, last hour</h3>
  ${options.countsRecorded ? '' : html`<p class="banner info">${COUNTS_OFF_NOTE}</p>`}
  <p id="kind-throughput-summary" class="muted"></p>
  <div id="kind-chart" class="chart" role="img" aria-label="This kind's jobs completed and failed per minute"></div>
  <h3>Newest jobs</h3>
  <p id="kind-jobs-empty" class="muted" hidden>None in the queue (completed jobs of kinds that keep nothing
    are gone).</p>
  <div class="scroll">
    <table id="kind-jobs">
      <thead><tr><th>Job</th><th>Status</th><th class="num">Attempts</th><th>Payload</th><th>Created</th></tr></thead>
      <tbody></tbody>
    </table>
  </div>
  </div>
</div>`;
}
