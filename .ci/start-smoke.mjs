// CI: the README's first command as a new user runs it — `npm start` with no DATABASE_URL: the
// sidecar on an embedded PostgreSQL, its HTTP API on a free port. Enqueues a job, waits for it to
// complete, then stops the process group with SIGTERM and expects a clean `stopped`. Plain Node
// (no dependencies), so it runs before anything else is trusted.
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'pgdrain-start-smoke-'));
chmodSync(dataDir, 0o755); // as root, the embedded PostgreSQL runs as `postgres`, which must enter it
const child = spawn('npm', ['start'], {
  env: { PATH: process.env.PATH, HOME: process.env.HOME, PGDRAIN_DATA_DIR: dataDir, PORT: '0', LOG_FORMAT: 'json' },
  detached: true,
  stdio: ['ignore', 'pipe', 'pipe'],
});
let out = '';
child.stdout.on('data', (d) => (out += d));
child.stderr.on('data', (d) => (out += d));
const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
const fail = (why) => {
  console.error(`start-smoke: ${why}\n${out}`);
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {}
  process.exit(1);
};
const until = async (what, probe, ms) => {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
    const value = await probe();
    if (value) return value;
  }
  fail(`timed out waiting for ${what}`);
};

const url = await until(
  '"sidecar started"',
  () => /"url":"(http:\/\/[^"]+)".*"msg":"sidecar started"/.exec(out)?.[1],
  120_000,
);
const token = readFileSync(path.join(dataDir, 'api-token'), 'utf8').trim();
const auth = { authorization: `Bearer ${token}` };
const health = await fetch(`${url}/healthz`).then((r) => r.json());
if (health.ok !== true) fail(`/healthz answered ${JSON.stringify(health)}`);
const posted = await fetch(`${url}/jobs`, {
  method: 'POST',
  headers: { ...auth, 'content-type': 'application/json' },
  body: JSON.stringify({ kind: 'noop', payload: { smoke: true } }),
});
const { id } = await posted.json();
if (posted.status !== 201) fail(`POST /jobs answered ${posted.status}`);
// noop keeps nothing: the wait answers `completed` (gone: true), or 404 when the job finished and was
// deleted before the wait began. Either way the per-minute counts hold its completion.
const waited = await fetch(`${url}/jobs/${id}?waitSeconds=30`, { headers: auth });
const ended = await waited.json();
if (!(waited.status === 404 || ended.status === 'completed')) fail(`job ${id} ended ${JSON.stringify(ended)}`);
const _counted = await until(
  'the completion in /stats/throughput',
  async () => {
    const { minutes } = await fetch(`${url}/stats/throughput?minutes=5&kind=noop`, { headers: auth }).then((r) =>
      r.json(),
    );
    return minutes.reduce((n, m) => n + m.completed, 0) >= 1;
  },
  10_000,
);
process.kill(-child.pid, 'SIGTERM');
const { code, signal } = await exited;
await until('"stopped"', () => /"msg":"stopped"/.test(out), 20_000);
rmSync(dataDir, { recursive: true, force: true });
console.log(
  `start-smoke: npm start on Node ${process.version} served ${url}, ran job ${id}, stopped (exit ${code ?? signal})`,
);
