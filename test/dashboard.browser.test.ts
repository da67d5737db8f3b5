// The dashboard in a real headless Chromium (Debian's, driven by playwright-core), served by the
// sidecar running as a real process on a real PostgreSQL: log in, see the counts the database
// holds, retry and delete dead jobs and find the rows changed. Screenshots go to .tmp/artifacts/.
//
// Chromium: CHROMIUM_PATH, else /usr/bin/chromium (`apt-get install chromium`; .ci/run installs
// it). Without one the suite is skipped with a message, unless PGDRAIN_BROWSER_TESTS=required
// (set by .ci/run), where a missing browser fails it.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { serve } from '@hono/node-server';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { type Browser, type Page, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/http/app.ts';
import { createDefaultRegistry } from '../src/jobs/index.ts';
import { claim, fail } from '../src/queries/index.ts';
import type { Db } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
const required = process.env.PGDRAIN_BROWSER_TESTS === 'required';
const ARTIFACTS = path.resolve('.tmp/artifacts');
const TOKEN = 'dashboard-test-token-5d1c9e';
const READ_TOKEN = 'dashboard-read-token-0a1b2c';
const ENQUEUE_TOKEN = 'dashboard-enqueue-token-3d4e';

if (!haveChromium && !required) {
  console.warn(
    `dashboard.browser.test.ts skipped: no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`,
  );
}

describe.skipIf(!haveChromium && !required)('the dashboard in Chromium', () => {
  let t: TestDatabase;
  let sidecar: SidecarProcess;
  let browser: Browser;

  beforeAll(async () => {
    if (!haveChromium) throw new Error(`PGDRAIN_BROWSER_TESTS=required but there is no Chromium at ${CHROMIUM}`);
    await mkdir(ARTIFACTS, { recursive: true });
    t = await createTestDatabase();
    sidecar = await startSidecarProcess({
      DATABASE_URL: t.url,
      API_TOKEN: TOKEN,
      API_TOKENS: `read:${READ_TOKEN},enqueue:${ENQUEUE_TOKEN}`,
      POLL_INTERVAL_MS: '200',
    });
    // Running as root in CI: Chromium's sandbox needs user namespaces it may not have there.
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });
  afterAll(async () => {
    await browser?.close();
    sidecar?.kill();
    await sidecar?.exited;
    await t?.close();
  });

  /** Kinds the sidecar has no handler for stay where the test puts them. */
  async function arrangeQueue() {
    await t.query(`
      INSERT INTO pgdrain.jobs (kind, payload, status, run_at, attempts, max_attempts, locked_at, locked_by, last_error, created_at)
      SELECT 'email', '{}'::jsonb, 'pending', now() - interval '3 minutes', 0, 3, NULL::timestamptz, NULL::text, NULL::text, now() - interval '3 minutes' FROM generate_series(1, 7)
      UNION ALL SELECT 'email', '{}', 'pending', now() + interval '1 hour', 1, 3, NULL, NULL, 'Error: 451 try later', now() FROM generate_series(1, 2)
      UNION ALL SELECT 'email', '{}', 'running', now(), 1, 3, now(), 'other-worker:1', NULL, now() FROM generate_series(1, 3)
      UNION ALL SELECT 'report', '{}', 'pending', now() - interval '5 seconds', 0, 3, NULL, NULL, NULL, now() FROM generate_series(1, 4)
      UNION ALL SELECT 'report', jsonb_build_object('n', n), 'dead', now(), 3, 3, NULL, NULL,
                       'Error: report ' || n || ' failed: <b>disk full</b>', now() - make_interval(mins => n) FROM generate_series(1, 3) AS n`);
    // Real runs through the sidecar for the chart: 25 completions, and one job whose payload the
    // kind rejects, which fails for good (a failed attempt and a dead job).
    const res = await fetch(`${sidecar.url}/jobs/batch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jobs: Array.from({ length: 25 }, (_, i) => ({ kind: 'noop', payload: { i } })) }),
    });
    expect(res.status).toBe(201);
    await t.query(`INSERT INTO pgdrain.jobs (kind, payload) VALUES ('record', '{"ms": "not a number"}')`);
    await until(
      () =>
        t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind IN ('noop', 'record') AND status <> 'dead'`,
        ),
      (rows) => rows[0]!.n === 0,
      15_000,
      'the sidecar to drain the noop and record jobs',
    );
  }

  /** A page logged in with the admin token, accepting every dialog and collecting console errors. */
  async function openDashboard() {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const consoleErrors: string[] = [];
    page.on('pageerror', (e) => consoleErrors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
    const dialogs: string[] = [];
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.accept();
    });
    await page.goto(sidecar.url);
    await page.fill('#token', TOKEN);
    await page.click('#login button[type=submit]');
    await page.locator('#view').waitFor({ state: 'visible' });
    return { context, page, consoleErrors, dialogs };
  }

  const cell = (page: Page, kind: string, column: string) =>
    page.locator(`#kinds tr[data-kind="${kind}"] td[data-col="${column}"]`).getAttribute('data-value').then(Number);

  it('asks for the token, shows what the database holds, and retries and deletes dead jobs', async () => {
    await arrangeQueue();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    // A fake clock that runs like the real one until the test pauses it (see the 409 below).
    await context.clock.install();
    const page = await context.newPage();
    const consoleErrors: string[] = [];
    page.on('console', (m) => m.type() === 'error' && consoleErrors.push(`${m.text()} [${m.location().url}]`));
    page.on('pageerror', (e) => consoleErrors.push(e.message));
    page.on('dialog', (dialog) => void dialog.accept());

    await page.goto(sidecar.url);
    await expect.poll(() => page.locator('#login').isVisible()).toBe(true);
    expect(await page.locator('#view').isVisible()).toBe(false);

    // A wrong token: a clear message, and the form again.
    await page.fill('#token', 'not-the-token-at-all');
    await page.click('#login button[type=submit]');
    await expect.poll(() => page.locator('#login-message').textContent()).toContain('The token was refused');
    expect(await page.evaluate(() => sessionStorage.getItem('pgdrain.token'))).toBeNull();

    await page.fill('#token', TOKEN);
    await page.click('#login button[type=submit]');
    await page.locator('#view').waitFor({ state: 'visible' });
    expect(await page.evaluate(() => sessionStorage.getItem('pgdrain.token'))).toBe(TOKEN);

    // The kind table and the cards against the rows.
    const counts = await t.query<{
      kind: string;
      pending: number;
      ready: number;
      delayed: number;
      running: number;
      dead: number;
    }>(`
      SELECT kind, count(*) FILTER (WHERE status = 'pending')::int AS pending,
             count(*) FILTER (WHERE status = 'pending' AND run_at <= now())::int AS ready,
             count(*) FILTER (WHERE status = 'pending' AND run_at > now())::int AS delayed,
             count(*) FILTER (WHERE status = 'running')::int AS running,
             count(*) FILTER (WHERE status = 'dead')::int AS dead
        FROM pgdrain.jobs GROUP BY kind ORDER BY kind`);
    expect(counts.map((c) => c.kind)).toEqual(['email', 'record', 'report']);
    expect(
      await page.locator('#kinds tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-kind'))),
    ).toEqual(['email', 'record', 'report']);
    for (const row of counts) {
      for (const column of ['pending', 'ready', 'delayed', 'running', 'dead'] as const) {
        expect(await cell(page, row.kind, column), `${row.kind} ${column}`).toBe(row[column]);
      }
    }
    expect(counts.find((c) => c.kind === 'email')).toMatchObject({
      pending: 9,
      ready: 7,
      delayed: 2,
      running: 3,
      dead: 0,
    });
    const total = (column: 'ready' | 'delayed' | 'running' | 'dead') => counts.reduce((s, c) => s + c[column], 0);
    for (const column of ['ready', 'delayed', 'running', 'dead'] as const) {
      expect(Number(await page.locator(`#total-${column}`).getAttribute('data-value')), column).toBe(total(column));
    }
    // The oldest ready job waited three minutes: past the 60 s threshold, in the warning colour.
    expect(await page.locator('#oldest-ready').textContent()).toMatch(/^3 min/);
    expect(await page.locator('#oldest-card').getAttribute('class')).toContain('warn');

    // The chart's totals against the counter table: 25 completed, 1 failed attempt, 1 dead.
    const [sums] = await t.query(
      `SELECT sum(completed)::int AS completed, sum(failed)::int AS failed, sum(dead)::int AS dead FROM pgdrain.job_counts`,
    );
    expect(sums).toEqual({ completed: 25, failed: 1, dead: 1 });
    await expect.poll(async () => Number(await page.locator('#sum-completed').getAttribute('data-value'))).toBe(25);
    expect(Number(await page.locator('#sum-failed').getAttribute('data-value'))).toBe(1);
    expect(Number(await page.locator('#sum-dead').getAttribute('data-value'))).toBe(1);
    expect(await page.locator('#chart svg rect.completed').count()).toBeGreaterThan(0);

    // The kinds as the sidecar wrote them at its start (pgdrain.kinds), with who wrote them.
    const defined = await t.query<{ kind: string; written_by: string }>(
      'SELECT kind, written_by FROM pgdrain.kinds ORDER BY kind',
    );
    expect(defined.map((d) => d.kind)).toContain('record');
    expect(
      await page
        .locator('#definitions tbody tr')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-definition'))),
    ).toEqual(defined.map((d) => d.kind));
    expect(await page.locator('#definitions tr[data-definition="record"]').textContent()).toContain(
      `${defined[0]!.written_by} (this drainer has it)`,
    );

    // Dead jobs, newest first, as the database lists them; error text shown as text, not HTML.
    const dead = await t.query<{ id: string; kind: string }>(
      `SELECT id::text, kind FROM pgdrain.jobs WHERE status = 'dead' ORDER BY id DESC`,
    );
    expect(
      await page.locator('#dead tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job'))),
    ).toEqual(dead.map((d) => d.id));
    expect(await page.locator('#dead code').allTextContents()).toContain('Error: report 3 failed: <b>disk full</b>');
    expect(await page.locator('#dead b').count()).toBe(0);

    await mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard.png'), fullPage: true });

    // Retry: the job is pending again in the database, and leaves the dead list. (A report job:
    // the sidecar has no handler for it, so it stays pending for us to see.)
    const [toRetry, toDelete] = dead.filter((d) => d.kind === 'report').map((d) => d.id) as [string, string];
    await page.click(`#dead tr[data-job="${toRetry}"] button[data-action="retry"]`);
    await until(
      () =>
        t.query<{ status: string; attempts: number }>(`SELECT status, attempts FROM pgdrain.jobs WHERE id = $1`, [
          toRetry,
        ]),
      (rows) => rows[0]?.status === 'pending',
      5_000,
      `job ${toRetry} to be pending`,
    ).then((rows) => expect(rows).toEqual([{ status: 'pending', attempts: 0 }]));
    await page.locator(`#dead tr[data-job="${toRetry}"]`).waitFor({ state: 'detached' });
    await expect.poll(() => page.locator('#banner').textContent()).toContain(`Job #${toRetry} is pending again`);

    // Delete (after the confirm dialog): the row is gone from the table and from the database.
    await page.click(`#dead tr[data-job="${toDelete}"] button[data-action="delete"]`);
    await until(
      () => t.query(`SELECT id FROM pgdrain.jobs WHERE id = $1`, [toDelete]),
      (rows) => rows.length === 0,
      5_000,
      `job ${toDelete} to be deleted`,
    );
    await page.locator(`#dead tr[data-job="${toDelete}"]`).waitFor({ state: 'detached' });
    const stillDead = await t.query<{ id: string }>(
      `SELECT id::text FROM pgdrain.jobs WHERE status = 'dead' ORDER BY id DESC`,
    );
    expect(stillDead).toHaveLength(dead.length - 2);
    await expect
      .poll(() => page.locator('#dead tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job'))))
      .toEqual(stillDead.map((d) => d.id));

    // Someone else retried a job while this page still lists it as dead: Retry is refused with
    // 409, the page says why, and the message outlives the refresh that removes the row. The
    // page's timers are paused so no scheduled refresh removes the row before the click. The
    // pause lies a little ahead of the page's clock (a pause in its past throws, and the page's
    // clock runs on while this test's message reaches it); a refresh that the fast-forward fires
    // is given time to finish before the job changes under the page.
    const [raced] = await t.query<{ id: string }>(
      `SELECT id::text FROM pgdrain.jobs WHERE status = 'dead' AND kind = 'report'`,
    );
    await page.clock.pauseAt((await page.evaluate(() => Date.now())) + 250);
    await page.waitForTimeout(300);
    await page.locator(`#dead tr[data-job="${raced!.id}"]`).waitFor({ state: 'attached' });
    await t.query(`UPDATE pgdrain.jobs SET status = 'pending', attempts = 0 WHERE id = $1`, [raced!.id]);
    await page.click(`#dead tr[data-job="${raced!.id}"] button[data-action="retry"]`);
    await page.locator(`#dead tr[data-job="${raced!.id}"]`).waitFor({ state: 'detached' });
    expect(await page.locator('#banner').textContent()).toBe(
      `job ${raced!.id} is pending; only dead jobs can be retried`,
    );
    expect(await page.locator('#banner').isVisible()).toBe(true);
    await page.clock.resume();

    // A phone's width: nothing wider than the screen, dead jobs as cards.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(300);
    const tooWide = await page.evaluate(() =>
      [...document.querySelectorAll<HTMLElement>('body *')]
        .filter((e) => e.getBoundingClientRect().right > 390 && !e.closest('.scroll'))
        .map((e) => e.id || e.tagName),
    );
    expect(await page.evaluate(() => document.documentElement.scrollWidth), tooWide.join(', ')).toBeLessThanOrEqual(
      390,
    );
    const kindsBox = page.locator('#kinds').locator('..');
    expect(await kindsBox.evaluate((box) => box.scrollWidth - box.clientWidth)).toBeLessThanOrEqual(0);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-phone.png'), fullPage: true });

    // Chromium logs the one refused request of the wrong token (401) and the refused retry (409);
    // those were the point. Nothing else may reach the console: no script error, no other failure.
    const refused = consoleErrors.filter((e) => /status of 40[19]/.test(e));
    expect(
      refused.map((e) => /status of (\d+)/.exec(e)![1]),
      JSON.stringify(consoleErrors),
    ).toEqual(['401', '409']);
    expect(consoleErrors.filter((e) => !refused.includes(e))).toEqual([]);
    await context.close();
  }, 90_000);

  it('pauses and resumes a kind for the drainer, and retries every dead job at once after a confirmation', async () => {
    await resetQueue(t);
    const { context, page, consoleErrors, dialogs } = await openDashboard();

    // Pause `record` (a delayed job keeps its row on the page): the pause is in the database, and
    // the sidecar leaves ready record jobs alone.
    await t.query(
      `INSERT INTO pgdrain.jobs (kind, payload, run_at) VALUES ('record', '{}', now() + interval '1 hour')`,
    );
    await page.locator('#kinds tr[data-kind="record"]').waitFor({ timeout: 10_000 });
    await page.click('#kinds tr[data-kind="record"] button[data-action="pause"]');
    await until(
      () => t.query(`SELECT kind FROM pgdrain.paused_kinds`),
      (r) => r.length === 1,
      5_000,
      'the pause',
    ).then((r) => expect(r).toEqual([{ kind: 'record' }]));
    await expect.poll(() => page.locator('#kinds tr[data-kind="record"]').getAttribute('data-paused')).toBe('true');
    expect(await page.locator('#kinds tr[data-kind="record"] .paused-badge').textContent()).toBe('paused');
    expect(await page.locator('#banner').textContent()).toBe(
      'record is paused: no drainer claims it until it is resumed.',
    );
    await t.query(`INSERT INTO pgdrain.jobs (kind, payload) SELECT 'record', '{}' FROM generate_series(1, 5)`);
    await new Promise((r) => setTimeout(r, 1_000)); // five of the sidecar's polls
    expect(
      await t.query(
        `SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'record' AND status = 'pending' AND run_at <= now()`,
      ),
    ).toEqual([{ n: 5 }]);

    // Resume: the button turns back, and the sidecar drains the five (the delayed one waits).
    await page.click('#kinds tr[data-kind="record"] button[data-action="resume"]');
    await until(
      () => t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'record'`),
      (r) => r[0]!.n === 1,
      5_000,
      'the record jobs to run after resume',
    );
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.paused_kinds`)).toEqual([{ n: 0 }]);
    await expect.poll(() => page.locator('#kinds tr[data-kind="record"]').getAttribute('data-paused')).toBe('false');

    // Retry every dead job (kinds the sidecar has no handler for, so they stay pending to look at).
    await t.query(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error)
                   SELECT CASE WHEN n % 2 = 0 THEN 'report' ELSE 'email' END, '{}', 'dead', 3, 3, 'boom' FROM generate_series(1, 12) AS n`);
    await page.locator('#dead-bulk').waitFor({ state: 'visible', timeout: 10_000 });
    await page.click('#retry-all');
    await until(
      () =>
        t.query(
          `SELECT status, attempts, count(*)::int AS n FROM pgdrain.jobs WHERE kind IN ('email', 'report') GROUP BY 1, 2`,
        ),
      (r) => r.length === 1 && r[0]!.status === 'pending',
      5_000,
      'every dead job to be pending',
    ).then((r) => expect(r).toEqual([{ status: 'pending', attempts: 0, n: 12 }]));
    expect(dialogs).toEqual(['Retry every dead job? They go back to pending with their attempts reset.']);
    await expect.poll(() => page.locator('#banner').textContent()).toBe('12 dead jobs are pending again.');
    await page.locator('#dead-bulk').waitFor({ state: 'hidden' });
    expect(consoleErrors).toEqual([]);
    await context.close();
  }, 60_000);

  it('lists the jobs of a chosen state — progress while running, kept results, what they wait for — and cancels one', async () => {
    await resetQueue(t);
    // Kinds the sidecar has no handler for: the rows stay as the test puts them.
    const [running] = await t.query<{
      id: string;
    }>(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, locked_at, locked_by, locked_until, progress)
      VALUES ('report', '{}', 'running', 1, now(), 'elsewhere:1', now() + interval '1 hour', '{"step": 3, "of": 10}') RETURNING id::text`);
    const [done] = await t.query<{
      id: string;
    }>(`INSERT INTO pgdrain.jobs (kind, payload, status, attempts, finished_at, keep_until, result)
      VALUES ('report', '{}', 'completed', 1, now(), now() + interval '1 hour', '{"rows": 42, "html": "<b>bold</b>"}') RETURNING id::text`);
    const [pending] = await t.query<{ id: string }>(
      `INSERT INTO pgdrain.jobs (kind, payload) VALUES ('email', '{}') RETURNING id::text`,
    );
    const [waiting] = await t.query<{ id: string }>(
      `INSERT INTO pgdrain.jobs (kind, payload, status, waiting_for) VALUES ('email', '{}', 'waiting', 2) RETURNING id::text`,
    );
    const { context, page, consoleErrors, dialogs } = await openDashboard();

    // Running (the default): its last progress report.
    await page.locator(`#jobs tr[data-job="${running!.id}"]`).waitFor();
    const detail = async (id: string) =>
      JSON.parse((await page.locator(`#jobs tr[data-job="${id}"] td[data-col="detail"]`).textContent())!);
    expect(await detail(running!.id)).toEqual({ step: 3, of: 10 });
    expect(Number(await page.locator('#total-waiting').getAttribute('data-value'))).toBe(1);
    expect(await cell(page, 'email', 'waiting')).toBe(1);

    // Completed: the kept result, as text.
    await page.selectOption('#jobs-status', 'completed');
    await page.locator(`#jobs tr[data-job="${done!.id}"]`).waitFor();
    expect(await detail(done!.id)).toEqual({ rows: 42, html: '<b>bold</b>' });
    expect(await page.locator('#jobs b').count()).toBe(0);
    expect(await page.locator(`#jobs tr[data-job="${done!.id}"] button[data-action]`).count()).toBe(0);

    await page.selectOption('#jobs-status', 'waiting');
    await page.locator(`#jobs tr[data-job="${waiting!.id}"]`).waitFor();
    expect(await page.locator(`#jobs tr[data-job="${waiting!.id}"] td[data-col="detail"]`).textContent()).toBe(
      'waits for 2 more',
    );

    // Cancel a pending job: confirmed, gone from the database (its kind keeps nothing) and the list.
    await page.selectOption('#jobs-status', 'pending');
    await page.locator(`#jobs tr[data-job="${pending!.id}"]`).waitFor();
    await page.click(`#jobs tr[data-job="${pending!.id}"] button[data-action="cancel"]`);
    await until(
      () => t.query(`SELECT id FROM pgdrain.jobs WHERE id = $1`, [pending!.id]),
      (rows) => rows.length === 0,
      5_000,
      'the cancelled job to go',
    );
    await page.locator(`#jobs tr[data-job="${pending!.id}"]`).waitFor({ state: 'detached' });
    await expect.poll(() => page.locator('#banner').textContent()).toBe(`Job #${pending!.id} is cancelled.`);

    // Cancel the running one (held by a drainer elsewhere): asked to stop, shown as cancelling.
    await page.selectOption('#jobs-status', 'running');
    await page.click(`#jobs tr[data-job="${running!.id}"] button[data-action="cancel"]`);
    await expect.poll(() => page.locator('#banner').textContent()).toContain('is being stopped');
    await expect
      .poll(() => page.locator(`#jobs tr[data-job="${running!.id}"] .status`).textContent())
      .toBe('cancelling');
    expect(
      await t.query(`SELECT status, cancel_requested_at IS NOT NULL AS asked FROM pgdrain.jobs WHERE id = $1`, [
        running!.id,
      ]),
    ).toEqual([{ status: 'running', asked: true }]);
    expect(dialogs).toHaveLength(2);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-jobs.png'), fullPage: true });
    expect(consoleErrors).toEqual([]);
    await context.close();
  }, 60_000);

  it("opens a job from the list; a workflow's steps show as a timeline — results, a failure, what it waits for — and follow the run", async () => {
    await resetQueue(t);
    // A workflow kind the sidecar has no handler for, parked on an event: the rows as a run leaves them.
    const [run] = await t.query<{ id: string }>(
      `INSERT INTO pgdrain.jobs (kind, payload, status, attempts) VALUES ('onboarding', '{"userId": 42}', 'waiting', 1) RETURNING id::text`,
    );
    await t.query(
      `INSERT INTO pgdrain.workflow_steps (job_id, name, position, status, attempts, result, error, started_at, finished_at, wake_at, event, event_key) VALUES
         ($1, 'create-account', 0, 'completed', 1, '{"accountId": "<b>a-42</b>"}', NULL, now() - interval '90 seconds', now() - interval '89 seconds', NULL, NULL, NULL),
         ($1, 'charge', 1, 'failed', 2, NULL, 'Error: card declined', now() - interval '60 seconds', now() - interval '59 seconds', NULL, NULL, NULL),
         ($1, 'verified', 2, 'waiting', 1, NULL, NULL, now() - interval '30 seconds', NULL, now() + interval '3 days', 'email.verified', 'user:42')`,
      [run!.id],
    );
    const { context, page, consoleErrors, dialogs } = await openDashboard();
    await page.selectOption('#jobs-status', 'waiting');
    await page.locator(`#jobs tr[data-job="${run!.id}"]`).waitFor();
    expect(await page.locator(`#jobs tr[data-job="${run!.id}"] td[data-col="detail"]`).textContent()).toBe(
      'a workflow waiting on a step (open the job)',
    );
    await page.click(`#jobs tr[data-job="${run!.id}"] a[data-job-link]`);
    await page.locator('#job-detail').waitFor({ state: 'visible' });
    expect(new URL(page.url()).hash).toBe(`#/jobs/${run!.id}`);
    expect(await page.locator('#job-title').textContent()).toBe(`Job #${run!.id} · onboarding · waiting`);
    expect(await page.locator('#job-facts').textContent()).toContain('event email.verified (user:42) until');
    const steps = () =>
      page
        .locator('#steps tbody tr')
        .evaluateAll((rows) =>
          rows.map((r) => [
            r.getAttribute('data-step'),
            r.getAttribute('data-status'),
            r.querySelector('td.detail')?.textContent,
          ]),
        );
    expect(await steps()).toEqual([
      ['create-account', 'completed', '{"accountId":"<b>a-42</b>"}'],
      ['charge', 'failed', 'Error: card declined'],
      ['verified', 'waiting', expect.stringMatching(/^event email\.verified \(user:42\) until /)],
    ]);
    expect(await page.locator('#steps b').count()).toBe(0);
    // Each bar starts where its step did on the run's span of time: the later the step, the further right.
    const offsets = await page
      .locator('#steps .bar')
      .evaluateAll((bars) => bars.map((b) => (b as HTMLElement).getBoundingClientRect().left));
    expect(offsets[0]!).toBeLessThan(offsets[1]!);
    expect(offsets[1]!).toBeLessThan(offsets[2]!);
    // The event arrives: the shown job follows at the next refresh.
    await t.query(`SELECT pgdrain.send_event('email.verified', 'user:42', '{"at": "now"}')`);
    await expect
      .poll(() => page.locator('#steps tr[data-step="verified"]').getAttribute('data-status'), { timeout: 15_000 })
      .toBe('completed');
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-workflow.png'), fullPage: true });
    // A live run offers no restart; once it ended, each step offers one: from 'charge', the step
    // before it keeps its record and the run is pending again.
    expect(await page.locator('#steps button[data-action="retry-from-step"]').count()).toBe(0);
    await t.query(
      `UPDATE pgdrain.jobs SET status = 'dead', finished_at = now(), last_error = 'gave up' WHERE id = $1`,
      [run!.id],
    );
    await page.locator('#steps tr[data-step="charge"] button[data-action="retry-from-step"]').click();
    await expect.poll(() => page.locator('#banner').textContent()).toBe(`Job #${run!.id} runs again from step charge.`);
    expect(dialogs.at(-1)).toContain(`Run job #${run!.id} again from step charge?`);
    expect(await t.query(`SELECT status FROM pgdrain.jobs WHERE id = $1`, [run!.id])).toEqual([{ status: 'pending' }]);
    expect(
      await t.query(`SELECT name FROM pgdrain.workflow_steps WHERE job_id = $1 ORDER BY position`, [run!.id]),
    ).toEqual([{ name: 'create-account' }]);
    await page.click('#job-close');
    await page.locator('#job-detail').waitFor({ state: 'hidden' });
    await page.locator('#queue-page').waitFor({ state: 'visible' });
    expect(consoleErrors).toEqual([]);
    await context.close();
  }, 60_000);

  it("finds a job by its keys and payload; its page tells its whole story and follows it live; a kind's page; says when the server is lost", async () => {
    await resetQueue(t);
    // Kinds the sidecar does not have, enqueued by the SQL face and run by "another drainer" with the
    // statements every drain settles with.
    const [{ order }] = (await t.query<{ order: string }>(
      `SELECT pgdrain.enqueue('checkout', '{"orderId": 42, "lines": [{"sku": "tea", "qty": 2}]}',
         dedupe_key => 'order-42', group_key => 'customer-7')::text AS order`,
    )) as [{ order: string }];
    const [{ receipt }] = (await t.query<{ receipt: string }>(
      `SELECT pgdrain.enqueue('receipt', '{"orderId": 42}', after => ARRAY[$1::bigint])::text AS receipt`,
      [order],
    )) as [{ receipt: string }];
    for (const n of [1, 2, 3]) {
      await t.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [order]);
      const [job] = await claim(t.db, { batchSize: 1, lockToken: `checkout-drainer:${n}`, kinds: ['checkout'] });
      await fail(t.db, job!, { error: `Error: card declined (try ${n})\n    at charge (checkout.ts:${n}:7)` });
    }
    const { context, page, consoleErrors } = await openDashboard();

    // Find it: by dedupe key (any status), then by a payload field (the receipt has it too).
    await page.selectOption('#jobs-status', '');
    await page.fill('#search-dedupe', 'order-42');
    await page.click('#job-search button[type=submit]');
    const listed = () =>
      page.locator('#jobs tr[data-job]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job')));
    await expect.poll(listed).toEqual([order]);
    await page.click('#search-clear');
    await page.selectOption('#jobs-status', '');
    await page.fill('#search-payload', '{"orderId": 42}');
    await page.click('#job-search button[type=submit]');
    await expect.poll(listed).toEqual([receipt, order]);
    await page.fill('#search-payload', '[42]');
    await page.click('#job-search button[type=submit]');
    await expect.poll(() => page.locator('#banner').textContent()).toContain('write a JSON object');

    // Its page: why it is where it is, what it is, each attempt with its drainer and its whole error.
    await page.click(`#jobs tr[data-job="${order}"] a[data-job-link]`);
    await page.locator('#job-detail').waitFor({ state: 'visible' });
    expect(await page.locator('#job-title').textContent()).toBe(`Job #${order} · checkout · dead`);
    expect(await page.locator('#job-why').textContent()).toBe('Dead after 3 of 3 attempts: it waits for a person.');
    expect(JSON.parse((await page.locator('#job-payload').textContent())!)).toEqual({
      orderId: 42,
      lines: [{ sku: 'tea', qty: 2 }],
    });
    const facts = await page.locator('#job-facts').textContent();
    for (const fact of ['dedupe keyorder-42', 'group keycustomer-7', 'attempts3 of 3']) expect(facts).toContain(fact);
    const attempts = await page
      .locator('#attempts tbody tr')
      .evaluateAll((rows) =>
        rows.map((r) => [r.getAttribute('data-outcome'), ...[...r.querySelectorAll('td')].map((td) => td.textContent)]),
      );
    expect(attempts.map((a) => [a[0], a[1], a[6], a[7]])).toEqual(
      [1, 2, 3].map((n) => [
        'failed',
        String(n),
        `checkout-drainer:${n}`,
        `Error: card declined (try ${n})\n    at charge (checkout.ts:${n}:7)`,
      ]),
    );
    expect(await page.locator('#job-dependents li').evaluateAll((li) => li.map((l) => l.textContent))).toEqual([
      `#${receipt} receipt · dead`,
    ]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-job.png'), fullPage: true });

    // Follow the link to the job that waited for it, and back.
    await page.click(`#job-dependents a[data-job-link="${receipt}"]`);
    await expect.poll(() => page.locator('#job-title').textContent()).toBe(`Job #${receipt} · receipt · dead`);
    expect(await page.locator('#job-depends-on li').textContent()).toBe(`#${order} checkout · dead`);
    await page.goBack();
    await expect.poll(() => page.locator('#job-title').textContent()).toBe(`Job #${order} · checkout · dead`);

    // Retry from its page: the page follows the job without a reload; its attempts stay on record.
    await page.click('#job-actions button[data-action="retry"]');
    await expect.poll(() => page.locator('#job-title').textContent()).toBe(`Job #${order} · checkout · pending`);
    expect(await t.query(`SELECT status, attempts FROM pgdrain.jobs WHERE id = $1`, [order])).toEqual([
      { status: 'pending', attempts: 0 },
    ]);
    expect(await page.locator('#attempts tbody tr').count()).toBe(3);
    await t.query(`UPDATE pgdrain.jobs SET priority = 7 WHERE id = $1`, [order]);
    await expect.poll(() => page.locator('#job-facts').textContent(), { timeout: 15_000 }).toContain('priority7');

    // The kind's page, from the title's link: its counts, definition and newest jobs.
    await page.click('#job-title a[data-kind-link]');
    await page.locator('#kind-page').waitFor({ state: 'visible' });
    await expect.poll(() => page.locator('#kind-title').textContent()).toBe('Kind checkout');
    await expect.poll(() => page.locator('#kind-ready').getAttribute('data-value')).toBe('1');
    expect(await page.locator('#kind-definition').textContent()).toContain('no drainer has written it');
    expect(
      await page.locator('#kind-jobs tr[data-job]').evaluateAll((r) => r.map((x) => x.getAttribute('data-job'))),
    ).toEqual([order]);

    // The server goes away: the page says so and keeps its data; it comes back, and so does the page.
    await context.setOffline(true);
    await expect
      .poll(() => page.locator('#banner').textContent(), { timeout: 15_000 })
      .toContain('The server does not answer');
    await context.setOffline(false);
    await expect.poll(() => page.locator('#banner').isVisible(), { timeout: 15_000 }).toBe(false);
    expect(consoleErrors.filter((e) => !e.includes('ERR_INTERNET_DISCONNECTED'))).toEqual([]);
    await context.close();
  }, 90_000);

  it('with a read token the page shows the queue and every action is disabled, saying why; an enqueue token cannot open it', async () => {
    await t.query(
      `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error) VALUES ('report', '{}', 'dead', 3, 3, 'boom')`,
    );
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(sidecar.url);
    await page.fill('#token', READ_TOKEN);
    await page.click('#login button[type=submit]');
    await page.locator('#view').waitFor({ state: 'visible' });
    await page.locator('#readonly-note').waitFor({ state: 'visible' });
    await page.locator('#dead tbody tr').first().waitFor();
    const buttons = page.locator('button[data-action]');
    expect(await buttons.count()).toBeGreaterThan(2);
    expect(await buttons.evaluateAll((all) => all.every((b) => (b as HTMLButtonElement).disabled))).toBe(true);
    expect(await page.locator('#dead button[data-action="retry"]').first().getAttribute('title')).toContain(
      'can only read',
    );
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE status = 'dead'`)).toEqual([
      { n: await page.locator('#dead tr[data-job]').count() },
    ]);

    await page.click('#forget');
    await page.fill('#token', ENQUEUE_TOKEN);
    await page.click('#login button[type=submit]');
    await expect.poll(() => page.locator('#login-message').textContent()).toContain("this token's scope is enqueue");
    await context.close();
  }, 60_000);

  it('says so when the database is down, and keeps asking', async () => {
    // The same app, served over HTTP, on a database that refuses connections.
    const pool = new pg.Pool({
      connectionString: 'postgres://app:secret-pw@127.0.0.1:1/nowhere',
      connectionTimeoutMillis: 1000,
    });
    pool.on('error', () => {});
    const app = createApp({
      withDb: (fn) => fn(drizzle({ client: pool }) as unknown as Db),
      registry: createDefaultRegistry({}),
      apiToken: TOKEN,
    });
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(url);
      await page.fill('#token', TOKEN);
      await page.click('#login button[type=submit]');
      await expect
        .poll(() => page.locator('#banner').textContent(), { timeout: 10_000 })
        .toContain('The database does not answer');
      expect(await page.locator('#banner').isVisible()).toBe(true);
      expect(await page.locator('#banner').textContent()).not.toContain('secret-pw');
      expect(await page.locator('#login').isVisible()).toBe(false); // the token was fine: no login form
    } finally {
      await context.close();
      await new Promise((resolve) => server.close(resolve));
      await pool.end();
    }
  }, 60_000);
});
