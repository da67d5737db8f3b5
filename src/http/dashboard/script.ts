// The dashboard's browser script, served by the app at /dashboard/script.js (no build step, no
// framework). It reads the public HTTP API with the token the person typed (sessionStorage: this
// tab only), refreshes every few seconds while the tab is visible, and builds every element with
// textContent, so nothing from the database is ever parsed as HTML. Plain ES2020 in a raw string:
// no backticks or dollar-brace inside, the string is served exactly as written.
export const DASHBOARD_SCRIPT = String.raw`
(function () {
  'use strict';
  var TOKEN_KEY = 'pgdrain.token';
  var STATES = ['ready', 'delayed', 'running', 'dead'];
  var body = document.body;
  var basePath = body.dataset.basePath || '';
  var warnSeconds = Number(body.dataset.warnSeconds) || 60;
  var refreshMs = (Number(body.dataset.refreshSeconds) || 5) * 1000;
  var byId = function (id) { return document.getElementById(id); };
  var lastOk = null;
  var lastThroughput = null;
  var inFlight = null;
  var noticeTimer = null;
  var tokenScope = null; // from the API's X-Pgdrain-Scope: 'read' makes the page read-only

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  function ApiFailure(kind, status, code, message) {
    this.kind = kind; this.status = status; this.code = code; this.message = message;
  }

  async function api(method, path) {
    var response;
    try {
      response = await fetch(basePath + path, {
        method: method,
        headers: { Authorization: 'Bearer ' + token(), Accept: 'application/json' },
        cache: 'no-store',
      });
    } catch (e) {
      throw new ApiFailure('network', 0, 'network', 'The server does not answer.');
    }
    if (response.headers.get('X-Pgdrain-Scope')) tokenScope = response.headers.get('X-Pgdrain-Scope');
    if (response.status === 204) return null;
    var data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      var error = (data && data.error) || {};
      // A token that cannot read (an enqueue-only one) cannot open the page at all.
      var refused = response.status === 401 || (response.status === 403 && method === 'GET');
      var kind = refused ? 'auth' : error.code === 'database_unavailable' ? 'database' : 'http';
      throw new ApiFailure(kind, response.status, error.code || 'http_' + response.status, error.message || 'HTTP ' + response.status);
    }
    return data;
  }

  // --- views -------------------------------------------------------------------------------
  function showLogin(message) {
    byId('view').hidden = true;
    byId('forget').hidden = true;
    byId('login').hidden = false;
    byId('login-message').textContent = message || 'Enter the API token. It is kept in this browser tab only.';
    byId('login-message').className = message ? 'refused' : 'muted';
    byId('token').focus();
  }

  function showBanner(text, kind) {
    var banner = byId('banner');
    clearTimeout(noticeTimer);
    if (!text) { banner.hidden = true; banner.textContent = ''; banner.dataset.kind = ''; return; }
    banner.textContent = text;
    banner.dataset.kind = kind || 'error';
    banner.className = kind === 'info' ? 'banner info' : 'banner';
    banner.hidden = false;
    // 'error' describes the connection and goes with the next good refresh; the outcome of an
    // action ('info', or 'action' when it was refused) stays a few seconds whatever happens.
    if (kind === 'info' || kind === 'action') noticeTimer = setTimeout(function () { showBanner(null); }, kind === 'info' ? 5000 : 10000);
  }

  function handleFailure(failure) {
    if (!(failure instanceof ApiFailure)) {
      showBanner('The dashboard failed: ' + (failure && failure.message ? failure.message : String(failure)));
      return;
    }
    if (failure.kind === 'auth') {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin('The token was refused (' + failure.message + '). Enter the API token again.');
      return;
    }
    // Not a token problem: stay on the dashboard (last data dimmed, or dashes) and keep asking.
    byId('login').hidden = true;
    byId('view').hidden = false;
    byId('forget').hidden = false;
    var since = lastOk ? ' Showing the data from ' + lastOk.toLocaleTimeString() + '.' : '';
    if (failure.kind === 'database') {
      showBanner('The database does not answer: ' + failure.message + since + ' Retrying every ' + refreshMs / 1000 + ' s.');
      body.classList.add('stale');
    } else if (failure.kind === 'network') {
      showBanner('The server does not answer.' + since + ' Retrying every ' + refreshMs / 1000 + ' s.');
      body.classList.add('stale');
    } else {
      showBanner(failure.message + ' (HTTP ' + failure.status + ')');
    }
  }

  // --- refresh -----------------------------------------------------------------------------
  function refresh() {
    if (!token()) {
      if (byId('login').hidden) showLogin();
      return Promise.resolve();
    }
    if (inFlight) return inFlight;
    // /stats first: one request tells whether the token works (a refused token costs one request,
    // not three), then the chart and the dead jobs together.
    inFlight = api('GET', '/stats').then(function (stats) {
      return Promise.all([stats, api('GET', '/stats/throughput?minutes=60'), api('GET', '/jobs?status=dead&limit=100'), api('GET', '/schedules')]);
    }).then(function (results) {
      // Visible first: the chart is drawn to the width its box has.
      byId('login').hidden = true;
      byId('view').hidden = false;
      byId('forget').hidden = false;
      renderStats(results[0]);
      lastThroughput = results[1];
      renderThroughput(results[1]);
      renderDead(results[2]);
      renderSchedules(results[3]);
      applyScope();
      lastOk = new Date();
      byId('updated').textContent = 'Updated ' + lastOk.toLocaleTimeString();
      body.classList.remove('stale');
      if (byId('banner').dataset.kind === 'error') showBanner(null);
    }).catch(handleFailure).finally(function () { inFlight = null; });
    return inFlight;
  }

  function element(tag, attributes, children) {
    var node = document.createElement(tag);
    Object.keys(attributes || {}).forEach(function (name) {
      if (name === 'text') node.textContent = attributes[name];
      else node.setAttribute(name, attributes[name]);
    });
    (children || []).forEach(function (child) { node.appendChild(child); });
    return node;
  }

  function formatCount(n) { return Number(n).toLocaleString('en-US'); }

  function formatAge(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  function countCell(column, value, extraClass) {
    return element('td', { class: 'num' + (extraClass ? ' ' + extraClass : ''), 'data-col': column, 'data-value': String(value), text: formatCount(value) });
  }

  function renderStats(stats) {
    var kinds = Object.keys(stats.kinds).sort();
    var totals = { ready: 0, delayed: 0, running: 0, dead: 0 };
    var largest = 0;
    kinds.forEach(function (kind) {
      var s = stats.kinds[kind];
      STATES.forEach(function (state) { totals[state] += s[state]; });
      largest = Math.max(largest, s.ready + s.delayed + s.running + s.dead);
    });
    STATES.forEach(function (state) {
      var cell = byId('total-' + state);
      cell.textContent = formatCount(totals[state]);
      cell.dataset.value = String(totals[state]);
    });
    var oldest = stats.oldestReadySeconds;
    byId('oldest-ready').textContent = oldest == null ? 'none ready' : formatAge(oldest);
    byId('oldest-card').classList.toggle('warn', oldest != null && oldest > warnSeconds);

    var rows = kinds.map(function (kind) {
      var s = stats.kinds[kind];
      var bar = element('div', { class: 'bar', title: STATES.map(function (state) { return state + ' ' + s[state]; }).join(', ') });
      STATES.forEach(function (state) {
        if (s[state] === 0) return;
        var segment = element('span', { class: state + '-bg' });
        segment.style.width = (100 * s[state] / largest) + '%';
        bar.appendChild(segment);
      });
      var age = s.oldestReadySeconds;
      var kindCell = element('td', { text: kind });
      if (s.paused) kindCell.appendChild(element('span', { class: 'paused-badge', text: 'paused' }));
      return element('tr', { 'data-kind': kind, 'data-paused': String(Boolean(s.paused)) }, [
        kindCell,
        countCell('pending', s.pending, 'pending'),
        countCell('ready', s.ready),
        countCell('delayed', s.delayed),
        countCell('running', s.running),
        countCell('dead', s.dead),
        element('td', { class: 'num oldest' + (age != null && age > warnSeconds ? ' warn' : ''), text: age == null ? '–' : formatAge(age) }),
        element('td', { class: 'bars' }, [bar]),
        element('td', { class: 'actions' }, [
          element('button', { type: 'button', 'data-action': s.paused ? 'resume' : 'pause', 'data-kind': kind, title: s.paused ? 'Let every drainer claim ' + kind + ' again' : 'Stop every drainer from claiming ' + kind + ' (enqueueing still works)', text: s.paused ? 'Resume' : 'Pause' }),
        ]),
      ]);
    });
    byId('kinds').tBodies[0].replaceChildren.apply(byId('kinds').tBodies[0], rows);
    byId('kinds-empty').hidden = kinds.length > 0;
    byId('kinds').parentNode.hidden = kinds.length === 0;
  }

  var SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attributes, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attributes).forEach(function (name) { node.setAttribute(name, attributes[name]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function renderThroughput(data) {
    var minutes = data.minutes;
    var sum = { completed: 0, failed: 0, dead: 0 };
    var peak = 0;
    minutes.forEach(function (m) {
      sum.completed += m.completed; sum.failed += m.failed; sum.dead += m.dead;
      peak = Math.max(peak, m.completed + m.failed);
    });
    var summary = byId('throughput-summary');
    summary.replaceChildren(
      element('strong', { id: 'sum-completed', 'data-value': String(sum.completed), text: formatCount(sum.completed) }),
      document.createTextNode(' completed, '),
      element('strong', { id: 'sum-failed', 'data-value': String(sum.failed), text: formatCount(sum.failed) }),
      document.createTextNode(' failed attempts, '),
      element('strong', { id: 'sum-dead', 'data-value': String(sum.dead), text: formatCount(sum.dead) }),
      document.createTextNode(' became dead in the last hour.'));

    var chart = byId('chart');
    var width = Math.max(280, chart.clientWidth - 16);
    var height = 180, left = 44, right = 6, top = 8, bottom = 22;
    var plotWidth = width - left - right, plotHeight = height - top - bottom;
    var scale = niceCeiling(peak);
    var root = svg('svg', { viewBox: '0 0 ' + width + ' ' + height, width: String(width), height: String(height) });
    [0, 0.5, 1].forEach(function (f) {
      var y = top + plotHeight * (1 - f);
      root.appendChild(svg('line', { class: 'grid', x1: String(left), x2: String(width - right), y1: String(y), y2: String(y) }));
      root.appendChild(svg('text', { class: 'axis', x: String(left - 6), y: String(y + 4), 'text-anchor': 'end' }, formatCount(Math.round(scale * f))));
    });
    var slot = plotWidth / Math.max(1, minutes.length);
    var barWidth = Math.max(1, slot - (slot > 4 ? 2 : 0));
    minutes.forEach(function (m, i) {
      var x = left + i * slot;
      var completedHeight = plotHeight * m.completed / scale;
      var failedHeight = plotHeight * m.failed / scale;
      var group = svg('g', {});
      group.appendChild(svg('title', {}, new Date(m.minute).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) +
        ': ' + m.completed + ' completed, ' + m.failed + ' failed'));
      if (m.completed > 0) group.appendChild(svg('rect', { class: 'completed', x: String(x), width: String(barWidth), y: String(top + plotHeight - completedHeight), height: String(completedHeight) }));
      if (m.failed > 0) group.appendChild(svg('rect', { class: 'failed', x: String(x), width: String(barWidth), y: String(top + plotHeight - completedHeight - failedHeight), height: String(failedHeight) }));
      root.appendChild(group);
    });
    [[0, 'start', '−' + minutes.length + ' min'], [0.5, 'middle', '−' + Math.round(minutes.length / 2) + ' min'], [1, 'end', 'now']].forEach(function (tick) {
      root.appendChild(svg('text', { class: 'axis', x: String(left + plotWidth * tick[0]), y: String(height - 6), 'text-anchor': tick[1] }, tick[2]));
    });
    chart.replaceChildren(root);
  }

  function niceCeiling(value) {
    if (value <= 4) return 4;
    var magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * magnitude >= value) return steps[i] * magnitude;
    return 10 * magnitude;
  }

  function renderDead(page) {
    var now = Date.now();
    var rows = page.jobs.map(function (job) {
      var created = new Date(job.createdAt);
      return element('tr', { 'data-job': job.id }, [
        element('td', { 'data-label': 'Job', text: '#' + job.id }),
        element('td', { 'data-label': 'Kind', text: job.kind }),
        element('td', { class: 'num', 'data-label': 'Attempts', text: job.attempts + ' / ' + job.maxAttempts }),
        element('td', { class: 'error', 'data-label': 'Last error' }, [element('code', { title: job.lastError || '', text: job.lastError || '–' })]),
        element('td', { 'data-label': 'Age', title: 'created ' + created.toLocaleString(), text: formatAge((now - created.getTime()) / 1000) }),
        element('td', { class: 'actions' }, [
          element('button', { type: 'button', 'data-action': 'retry', 'data-id': job.id, text: 'Retry' }),
          element('button', { type: 'button', class: 'danger', 'data-action': 'delete', 'data-id': job.id, text: 'Delete' }),
        ]),
      ]);
    });
    byId('dead').tBodies[0].replaceChildren.apply(byId('dead').tBodies[0], rows);
    byId('dead-empty').hidden = rows.length > 0;
    byId('dead').parentNode.hidden = rows.length === 0;
    byId('dead-count').textContent = rows.length === 0 ? '' : '(' + (page.nextCursor ? 'newest ' + rows.length : rows.length) + ')';
    byId('dead-bulk').hidden = rows.length === 0;
  }

  // A read token sees everything and changes nothing: every action button is disabled, with why.
  function applyScope() {
    var readOnly = tokenScope === 'read';
    byId('readonly-note').hidden = !readOnly;
    document.querySelectorAll('button[data-action]').forEach(function (button) {
      button.disabled = readOnly;
      if (readOnly) button.title = 'This token can only read (scope read): retry, delete and pause need an admin token.';
    });
  }

  function formatWhen(iso) {
    if (!iso) return '–';
    var date = new Date(iso);
    return date.toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }

  function renderSchedules(data) {
    var rows = data.schedules.map(function (s) {
      return element('tr', { 'data-schedule': s.name }, [
        element('td', { text: s.name }),
        element('td', {}, [element('code', { text: s.cron }), document.createTextNode(' ' + s.timezone)]),
        element('td', { text: s.kind }),
        element('td', { 'data-col': 'next', text: formatWhen(s.nextRunAt) }),
        element('td', { 'data-col': 'last', text: formatWhen(s.lastRunAt) }),
      ]);
    });
    byId('schedules').tBodies[0].replaceChildren.apply(byId('schedules').tBodies[0], rows);
    byId('schedules-section').hidden = rows.length === 0;
  }

  // --- actions -----------------------------------------------------------------------------
  // Each action: the request it makes, an optional confirmation, and what to say when it worked.
  var ACTIONS = {
    retry: { run: function (b) { return api('POST', '/jobs/' + b.dataset.id + '/retry'); }, done: function (b) { return 'Job #' + b.dataset.id + ' is pending again.'; } },
    'delete': {
      confirm: function (b) { return 'Delete dead job #' + b.dataset.id + '? This cannot be undone.'; },
      run: function (b) { return api('DELETE', '/jobs/' + b.dataset.id); },
      done: function (b) { return 'Job #' + b.dataset.id + ' was deleted.'; },
    },
    pause: { run: function (b) { return api('POST', '/kinds/' + encodeURIComponent(b.dataset.kind) + '/pause'); }, done: function (b) { return b.dataset.kind + ' is paused: no drainer claims it until it is resumed.'; } },
    resume: { run: function (b) { return api('POST', '/kinds/' + encodeURIComponent(b.dataset.kind) + '/resume'); }, done: function (b) { return b.dataset.kind + ' is resumed.'; } },
    'retry-all': {
      confirm: function () { return 'Retry every dead job? They go back to pending with their attempts reset.'; },
      run: function () { return api('POST', '/jobs/retry-dead'); },
      done: function (b, result) { return result.retried + ' dead jobs are pending again' + (result.done ? '.' : '; more are left, click again.'); },
    },
    'delete-all': {
      confirm: function () { return 'Delete every dead job? This cannot be undone.'; },
      run: function () { return api('POST', '/jobs/delete-dead'); },
      done: function (b, result) { return result.deleted + ' dead jobs were deleted' + (result.done ? '.' : '; more are left, click again.'); },
    },
  };

  async function act(button) {
    var action = ACTIONS[button.dataset.action];
    if (!action) return;
    if (action.confirm && !window.confirm(action.confirm(button))) return;
    var buttons = button.parentNode.querySelectorAll('button');
    buttons.forEach(function (b) { b.disabled = true; });
    try {
      var result = await action.run(button);
      showBanner(action.done(button, result), 'info');
    } catch (failure) {
      // A refused action (409: someone else retried it first; 404: already deleted) is news, not
      // a broken connection: say it and keep saying it past the refresh that follows.
      if (failure instanceof ApiFailure && failure.kind === 'http') showBanner(failure.message, 'action');
      else handleFailure(failure);
    }
    await refresh();
  }

  ['dead', 'kinds', 'dead-bulk'].forEach(function (id) {
    byId(id).addEventListener('click', function (event) {
      var button = event.target.closest('button[data-action]');
      if (button && !button.disabled) act(button);
    });
  });

  byId('login').addEventListener('submit', function (event) {
    event.preventDefault();
    var value = byId('token').value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    byId('token').value = '';
    refresh();
  });

  byId('forget').addEventListener('click', function () {
    sessionStorage.removeItem(TOKEN_KEY);
    showBanner(null);
    showLogin();
  });

  var resizeTimer = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (lastThroughput) renderThroughput(lastThroughput); }, 150);
  });

  document.addEventListener('visibilitychange', function () { if (!document.hidden) refresh(); });
  setInterval(function () { if (!document.hidden) refresh(); }, refreshMs);
  refresh();
})();
`;
