// One job's page (#/jobs/:id): what it is (payload, options), where it is and why, every attempt
// that failed or was lost with its drainer and full error, what it waits for and what waits for it,
// its dead letter, and a workflow's steps as a timeline — with the actions that fit its state.
// Everything comes from GET /jobs/:id; the page follows the job at each refresh.
import { MAX_ATTEMPT_LOG } from '../../../db/constants.ts';
import type { AttemptLogEntry, Job, LinkedJob, WorkflowStep } from '../../contract.ts';
import { byId, element, fillTable, formatAge, formatDuration, formatWhen, jobLink, jsonCell, kindLink } from './dom.ts';

/** Jobs in these states can still be cancelled. */
export const CANCELLABLE = new Set(['pending', 'running', 'waiting']);
/** The payload shown is cut here (the API has all of it). */
const PAYLOAD_SHOWN_CHARS = 20_000;

/** A button that acts on one job (the page's click handler runs its action). */
export const jobButton = (
  action: string,
  id: string,
  text: string,
  danger = false,
  extra: Record<string, string> = {},
) =>
  element('button', {
    type: 'button',
    ...(danger ? { class: 'danger' } : {}),
    'data-action': action,
    'data-id': id,
    ...extra,
    text,
  });

/** The job page, filled from GET /jobs/:id. */
export function renderJobPage(job: Job, now = Date.now()): void {
  byId('job-gone').hidden = true;
  byId('job-detail').hidden = false;
  byId('job-title').replaceChildren(
    document.createTextNode(`Job #${job.id} · `),
    kindLink(job.kind),
    document.createTextNode(` · ${job.status}`),
  );
  byId('job-why').replaceChildren(...whyText(job, now));
  byId('job-actions').replaceChildren(...jobActions(job));
  byId('job-facts').replaceChildren(
    ...facts(job).flatMap(([term, value]) => [
      element('dt', { text: term }),
      element('dd', {}, [typeof value === 'string' ? document.createTextNode(value) : value]),
    ]),
  );
  const payload = JSON.stringify(job.payload, null, 2) ?? 'null';
  byId('job-payload').textContent =
    payload.length > PAYLOAD_SHOWN_CHARS
      ? `${payload.slice(0, PAYLOAD_SHOWN_CHARS)}\n… (${payload.length} characters; GET /jobs/${job.id} has all)`
      : payload;
  renderAttempts(job, now);
  renderLinks('job-depends-on', job.dependsOn ?? []);
  renderLinks('job-dependents', job.dependents ?? []);
  const steps = job.steps ?? [];
  byId('job-steps').hidden = steps.length === 0;
  fillTable('steps', timelineRows(job, steps, now));
}

/** The job is not there: completed and deleted, or its keep ran out (or it never was). */
export function renderJobGone(id: string): void {
  byId('job-title').textContent = `Job #${id}`;
  byId('job-detail').hidden = true;
  const gone = byId('job-gone');
  gone.textContent =
    `Job #${id} is not in the queue: it completed and was deleted (its kind keeps nothing: give it ` +
    'keepCompletedSeconds to keep its story), its keep ran out, someone deleted it, or it never existed.';
  gone.hidden = false;
}

/** Where the job is and why, in one sentence. */
function whyText(job: Job, now: number): Node[] {
  const text = (s: string) => document.createTextNode(s);
  const runAt = Date.parse(job.runAt);
  switch (job.status) {
    case 'pending':
      if (job.waitingOn?.status === 'sleeping') return [text(`A workflow sleeping: ${waitingText(job.waitingOn)}.`)];
      if (job.waitingOn) return [text(`A workflow waiting: ${waitingText(job.waitingOn)}.`)];
      if (runAt > now)
        return [
          text(
            job.attempts > 0
              ? `Retrying: attempt ${job.attempts} failed; the next runs at ${formatWhen(job.runAt)}.`
              : `Delayed: it runs at ${formatWhen(job.runAt)} (in ${formatAge((runAt - now) / 1000)}).`,
          ),
        ];
      return [
        text(`Ready for ${formatAge((now - runAt) / 1000)}: the next drainer with a free slot for its kind takes it.`),
      ];
    case 'running':
      return [
        text(
          `Running on ${job.lockedBy ?? 'a drainer'} since ${formatWhen(job.lockedAt)}` +
            (job.cancelRequested ? ': asked to cancel, its handler is being stopped.' : '.'),
        ),
      ];
    case 'waiting':
      if (job.held) return [text(`Held by a code change: ${job.lastError ?? 'its code departs from its history'}.`)];
      if (job.waitingOn) return [text(`A workflow waiting on ${waitingText(job.waitingOn)}.`)];
      return [text(`Waits for ${job.waitingFor ?? 0} more of the jobs it runs after (below) to complete.`)];
    case 'dead': {
      const letter = job.deadLetterJobId ? [text(' Its dead letter is '), jobLink(job.deadLetterJobId), text('.')] : [];
      return [text(`Dead after ${job.attempts} of ${job.maxAttempts} attempts: it waits for a person.`), ...letter];
    }
    case 'completed':
      return [text(`Completed ${formatWhen(job.finishedAt)}.`)];
    case 'cancelled':
      return [text(`Cancelled ${formatWhen(job.finishedAt)}.`)];
  }
}

/** The actions its state allows, with the API's scopes (a read token sees them disabled). */
function jobActions(job: Job): HTMLButtonElement[] {
  const buttons: HTMLButtonElement[] = [];
  if (job.status === 'dead' || job.held) buttons.push(jobButton('retry', job.id, 'Retry'));
  if (CANCELLABLE.has(job.status) && !job.cancelRequested) buttons.push(jobButton('cancel', job.id, 'Cancel', true));
  if (job.status !== 'running') buttons.push(jobButton('delete', job.id, 'Delete', true));
  return buttons;
}

/** Its options and times, as terms and values. */
function facts(job: Job): [string, string | Node][] {
  const list: [string, string | Node][] = [
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['priority', String(job.priority)],
    ['created', formatWhen(job.createdAt)],
    ['run at', formatWhen(job.runAt)],
  ];
  if (job.finishedAt) list.push(['finished', formatWhen(job.finishedAt)]);
  if (job.groupKey !== null) list.push(['group key', job.groupKey]);
  if (job.dedupeKey !== null) list.push(['dedupe key', job.dedupeKey]);
  if (job.timeoutMs !== null) list.push(['timeout', formatDuration(job.timeoutMs)]);
  if (job.version !== 1) list.push(['version', String(job.version)]);
  if (job.waitingOn) list.push(['waiting on', waitingText(job.waitingOn)]);
  if (job.lastError) list.push(['last error', element('pre', { class: 'error', text: job.lastError })]);
  if (job.progress !== null) list.push(['progress', jsonCell(job.progress)]);
  if (job.result !== null) list.push(['result', element('pre', { text: JSON.stringify(job.result, null, 2) })]);
  if (job.deadLetterJobId) list.push(['dead letter', jobLink(job.deadLetterJobId)]);
  return list;
}

/** Each attempt that failed or was lost, then the one running now or the one that completed it. */
function renderAttempts(job: Job, now: number): void {
  const log = job.attemptLog ?? [];
  const rows = log.map((entry) => attemptRow(entry));
  if (job.status === 'running' && job.lockedAt)
    rows.push(
      attemptRow(
        { attempt: job.attempts, outcome: 'running', startedAt: job.lockedAt, endedAt: null, drainer: job.lockedBy },
        now,
      ),
    );
  if (job.status === 'completed')
    rows.push(
      attemptRow({
        attempt: job.attempts,
        outcome: 'completed',
        startedAt: null,
        endedAt: job.finishedAt,
        drainer: null,
      }),
    );
  fillTable('attempts', rows);
  byId('attempts-empty').hidden = rows.length > 0;
  byId('attempts-box').hidden = rows.length === 0;
  byId('attempts-note').textContent =
    log.length >= MAX_ATTEMPT_LOG ? `The latest ${log.length} attempts that failed or were lost are kept.` : '';
}

type AttemptShown = Omit<AttemptLogEntry, 'outcome' | 'endedAt' | 'error'> & {
  outcome: AttemptLogEntry['outcome'] | 'running' | 'completed';
  endedAt: string | null;
  error?: string;
};

function attemptRow(entry: AttemptShown, now = Date.now()): HTMLTableRowElement {
  const start = entry.startedAt ? Date.parse(entry.startedAt) : null;
  const end = entry.endedAt ? Date.parse(entry.endedAt) : entry.outcome === 'running' ? now : null;
  return element('tr', { 'data-attempt': String(entry.attempt), 'data-outcome': entry.outcome }, [
    element('td', { class: 'num', 'data-label': 'Attempt', text: String(entry.attempt) }),
    element('td', { 'data-label': 'Outcome' }, [
      element('span', { class: `status ${entry.outcome}`, text: entry.outcome }),
    ]),
    element('td', { 'data-label': 'Started', text: formatWhen(entry.startedAt) }),
    element('td', { 'data-label': 'Ended', text: formatWhen(entry.endedAt) }),
    element('td', {
      class: 'num',
      'data-label': 'Took',
      text: start !== null && end !== null ? formatDuration(end - start) : '–',
    }),
    element('td', { 'data-label': 'Drainer', text: entry.drainer ?? '–' }),
    element('td', { class: 'error', 'data-label': 'Error' }, [element('pre', { text: entry.error ?? '' })]),
  ]);
}

/** The jobs it waits for, or that wait for it: links with their state. */
function renderLinks(id: string, jobs: readonly LinkedJob[]): void {
  const list = byId(id);
  list.replaceChildren(
    ...jobs.map((j) =>
      element('li', { 'data-linked': j.id }, [
        jobLink(j.id),
        document.createTextNode(j.kind ? ` ${j.kind} · ${j.status}` : ' gone (completed and not kept)'),
      ]),
    ),
  );
  (list.parentNode as HTMLElement).hidden = jobs.length === 0;
}

/** What a sleeping or waiting step waits for. */
export function waitingText(step: WorkflowStep): string {
  if (step.status === 'sleeping') return `sleeping until ${formatWhen(step.wakeAt)}`;
  if (step.childId) return `job #${step.childId} (step ${step.name})`;
  return `event ${step.event} (${step.key})${
    step.match ? ` matching ${JSON.stringify(step.match)}` : ''
  }${step.wakeAt ? ` until ${formatWhen(step.wakeAt)}` : ''}`;
}

/** A run a person may restart from a step: finished, or held by a code change. */
const restartable = (job: Job) => ['dead', 'completed', 'cancelled'].includes(job.status) || job.held !== null;

/** A workflow's steps in order, each with a bar from its start to its end (or now) on the run's span of time. */
function timelineRows(job: Job, steps: readonly WorkflowStep[], now: number): HTMLTableRowElement[] {
  const start = Math.min(...steps.map((s) => Date.parse(s.startedAt)));
  const end = Math.max(now, ...steps.map((s) => Date.parse(s.finishedAt ?? s.startedAt)));
  const span = Math.max(1, end - start);
  return steps.map((step) => {
    const from = Date.parse(step.startedAt);
    const to = step.finishedAt ? Date.parse(step.finishedAt) : now;
    const bar = element('span', { class: `bar ${step.status}`, title: formatDuration(to - from) });
    // CSSOM, not a style attribute: the page's CSP allows no inline styles.
    bar.style.setProperty('margin-left', `${(((from - start) / span) * 100).toFixed(2)}%`);
    bar.style.setProperty('width', `${Math.max(0.5, ((to - from) / span) * 100).toFixed(2)}%`);
    const restart = restartable(job)
      ? [jobButton('retry-from-step', job.id, 'Run again from here', false, { 'data-step': step.name })]
      : [];
    return element('tr', { 'data-step': step.name, 'data-status': step.status }, [
      element('td', { 'data-label': 'Step', text: step.name }),
      element('td', { 'data-label': 'Status' }, [element('span', { class: 'status', text: step.status })]),
      element('td', { class: 'num', 'data-label': 'Tries', text: String(step.attempts) }),
      element('td', { 'data-label': 'Started', text: formatWhen(step.startedAt) }),
      element('td', { class: 'num', 'data-label': 'Took', text: step.finishedAt ? formatDuration(to - from) : '–' }),
      element('td', { class: 'timeline', 'data-label': 'Timeline' }, [bar]),
      element('td', { class: 'detail', 'data-label': 'Result, error or what it waits for' }, [stepOutcome(step)]),
      element('td', { class: 'actions' }, restart),
    ]);
  });
}

/** A step's result, its error (and when it tries again), or what it waits for (a child: a link). */
function stepOutcome(step: WorkflowStep): Node {
  if (step.status === 'failed')
    return element('code', {
      title: step.error ?? '',
      text: `${step.error ?? ''}${step.wakeAt ? ` (tries again at ${formatWhen(step.wakeAt)})` : ''}`,
    });
  if (step.childId)
    return element('span', {}, [
      document.createTextNode(step.status === 'completed' ? 'child ' : 'waits for child '),
      jobLink(step.childId),
      ...(step.status === 'completed' ? [document.createTextNode(' → '), jsonCell(step.result)] : []),
    ]);
  if (step.status === 'completed') return jsonCell(step.result);
  return document.createTextNode(waitingText(step));
}
