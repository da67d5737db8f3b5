// The dashboard's stylesheet, served by the app at /dashboard/style.css (no build step). Works at
// laptop and phone widths: the cards wrap, the kind table scrolls inside its box, and below
// 640 px each listed job and each dead job becomes a small card of its own.
export const DASHBOARD_CSS = `
:root {
  --bg: #f7f7f5; --panel: #fff; --text: #1c1f23; --muted: #5f6670; --line: #e2e4e8;
  --ready: #2f6fdf; --delayed: #9aa7bd; --running: #e0a100; --dead: #d0392b;
  --completed: #2e9d5b; --failed: #d0392b; --waiting: #8a63c9; --warn-bg: #fdecea; --info-bg: #eef3fd;
  color-scheme: light;
}
* { box-sizing: border-box; }
body { margin: 0; padding: 0 16px 32px; background: var(--bg); color: var(--text);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
body > * { max-width: 1100px; margin-left: auto; margin-right: auto; }
h1 { font-size: 20px; margin: 0; letter-spacing: -0.01em; }
h2 { font-size: 15px; margin: 24px 0 8px; }
.top { display: flex; align-items: baseline; gap: 12px; padding: 16px 0 8px; flex-wrap: wrap; }
.muted { color: var(--muted); }
.refused { color: var(--dead); }
button { font: inherit; border: 1px solid var(--line); background: var(--panel); color: var(--text);
  border-radius: 6px; padding: 4px 10px; cursor: pointer; }
button:hover { border-color: #b9bec7; }
button:disabled { opacity: 0.5; cursor: default; }
button.link { border: 0; background: none; color: var(--ready); padding: 0; margin-left: auto; }
button.danger { color: var(--dead); }
.banner { border-radius: 8px; padding: 10px 14px; margin: 8px auto; background: var(--warn-bg);
border: 1px solid #f3c3bd; }
.banner.info { background: var(--info-bg); border-color: #c9d8f6; }
.login { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 20px;
max-width: 460px; margin-top: 40px; }
.login h2 { margin-top: 0; }
.login label { display: block; font-weight: 600; margin-bottom: 6px; }
.login .row { display: flex; gap: 8px; }
.login input { flex: 1; min-width: 0; font: inherit; padding: 6px 10px; border: 1px solid var(--line);
border-radius: 6px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 10px; margin-top: 8px; }
.card { background: var(--panel); border: 1px solid var(--line); border-left: 4px solid var(--line);
border-radius: 8px; padding: 10px 12px; display: flex; flex-direction: column; }
.card.ready { border-left-color: var(--ready); } .card.delayed { border-left-color: var(--delayed); }
.card.running { border-left-color: var(--running); } .card.dead { border-left-color: var(--dead); }
.card.waiting { border-left-color: var(--waiting); }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .value { font-size: 24px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .hint { color: var(--muted); font-size: 12px; }
.card.age.warn { background: var(--warn-bg); border-left-color: var(--dead); }
.card.age.warn .value { color: var(--dead); }
.scroll { overflow-x: auto; background: var(--panel); border: 1px solid var(--line); border-radius: 8px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 7px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
tr:last-child td { border-bottom: 0; }
th { font-size: 12px; color: var(--muted); font-weight: 600; white-space: nowrap; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.warn { color: var(--dead); font-weight: 600; }
th.bars, td.bars { width: 32%; min-width: 140px; }
.bar { display: flex; height: 12px; border-radius: 3px; overflow: hidden; background: #eef0f3; margin-top: 3px; }
.bar span { display: block; height: 100%; }
.ready-bg { background: var(--ready); } .delayed-bg { background: var(--delayed); }
.running-bg { background: var(--running); } .dead-bg { background: var(--dead); }
.waiting-bg { background: var(--waiting); }
.legend { color: var(--muted); font-size: 12px; margin: 6px 0 0; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 4px 0 8px;
vertical-align: -1px; }
.swatch:first-child { margin-left: 0; }
.swatch.ready { background: var(--ready); } .swatch.delayed { background: var(--delayed); }
.swatch.running { background: var(--running); } .swatch.dead { background: var(--dead); }
.swatch.waiting { background: var(--waiting); }
.swatch.completed { background: var(--completed); } .swatch.failed { background: var(--failed); }
.chart { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 8px; }
.chart svg { display: block; width: 100%; height: 180px; }
.chart .axis { fill: var(--muted); font-size: 11px; }
.chart .grid { stroke: var(--line); }
.chart .completed { fill: var(--completed); } .chart .failed { fill: var(--failed); }
td.error, td.detail { max-width: 420px; }
td.detail code { display: block; white-space: pre-wrap; word-break: break-word; font-size: 12px; max-height: 4.5em;
overflow: hidden; }
.status { padding: 1px 6px; border-radius: 8px; font-size: 12px; background: var(--line); }
.status.cancelling { background: var(--warn-bg); }
.filter { margin: 0 0 8px; } .filter select { font: inherit; margin-left: 6px; }
td.error code { display: block; white-space: pre-wrap; word-break: break-word; font-size: 12px; max-height: 4.5em;
overflow: hidden; }
td.actions { white-space: nowrap; text-align: right; }
td.actions button + button { margin-left: 6px; }
.limits { font-size: 11px; color: var(--muted); }
.paused-badge { margin-left: 6px; padding: 1px 6px; border-radius: 8px; font-size: 11px; background: var(--line);
color: var(--muted); }
tr[data-paused="true"] td { opacity: 0.75; }
.bulk button + button { margin-left: 8px; }
button.link { background: none; border: 0; padding: 0; color: inherit; text-decoration: underline; cursor: pointer;
font: inherit; }
.job-detail { margin-top: 8px; }
.job-detail h3 { margin: 0 0 8px; font-size: 15px; } .job-detail h3 button { margin-left: 8px; font-size: 12px;
color: var(--muted); }
.job-detail dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 10px;
font-size: 13px; }
.job-detail dt { color: var(--muted); } .job-detail dd { margin: 0; word-break: break-word; }
td.timeline { min-width: 160px; width: 30%; }
.bar { display: block; height: 10px; border-radius: 3px; background: var(--completed); }
.bar.failed { background: var(--failed); } .bar.sleeping, .bar.waiting { background: var(--line);
border: 1px dashed var(--muted); }
.search { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: end; margin: 0 0 10px; }
.search label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
.search input, .search select { font: inherit; color: var(--text); padding: 4px 8px; border: 1px solid var(--line);
border-radius: 6px; min-width: 0; width: 150px; background: var(--panel); }
.search #search-payload { width: 200px; }
.search .buttons { display: flex; gap: 10px; align-items: center; padding-bottom: 4px; }
.search .buttons button.link { margin-left: 0; }
.crumbs { margin: 16px 0 0; } .crumbs a, a[data-job-link], a[data-kind-link] { color: var(--ready); }
.why { font-size: 15px; margin: 0 0 8px; }
.actions button + button { margin-left: 8px; }
.job-detail h3, .page h3 { font-size: 14px; margin: 18px 0 6px; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 12px; }
pre.json { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px;
max-height: 360px; overflow: auto; }
dd pre.error { color: var(--dead); }
td.error pre { max-height: 16em; overflow: auto; }
.status.failed, .status.lost { background: var(--warn-bg); } .status.completed { background: #e3f4ea; }
.status.running { background: #fdf3d6; }
ul.links, ul.notes { margin: 0; padding-left: 18px; }
.page dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; font-size: 13px; }
.page dl.facts dt { color: var(--muted); } .page dl.facts dd { margin: 0; word-break: break-word; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
.stale main { opacity: 0.55; }
@media (max-width: 640px) {
  body { padding: 0 10px 24px; }
  /* pending is ready + delayed, the oldest age is on its card, the bars repeat the counts: the
     rest, with the pause button, fits a phone */
  #kinds .pending, #kinds .oldest, #kinds .bars, #kinds .waiting { display: none; }
  #kinds th, #kinds td { padding: 7px 6px; }
  #kinds td.actions button { padding: 3px 6px; font-size: 12px; }
  .card .value { font-size: 20px; }
  #dead thead, #jobs thead { display: none; }
  #dead, #dead tbody, #dead tr, #dead td, #jobs, #jobs tbody, #jobs tr, #jobs td { display: block; width: 100%; }
  #dead tr, #jobs tr { border-bottom: 1px solid var(--line); padding: 6px 0; }
  #dead td, #jobs td { border: 0; padding: 3px 10px; text-align: left; }
  #dead td::before, #jobs td::before { content: attr(data-label); display: inline-block; min-width: 78px;
  color: var(--muted); font-size: 12px; }
  #dead td.error, #jobs td.detail { max-width: none; }
  #dead td.actions, #jobs td.actions { text-align: left; }
  #dead td.actions::before, #jobs td.actions::before { content: none; }
}
`;
