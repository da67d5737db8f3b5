// The operator's commands: the queue straight from DATABASE_URL — no HTTP, no token — through the
// same query module the API uses. For people at a terminal (tables that fit 80 columns,
// confirmation before deleting) and for scripts (--json, exit codes, one-line errors):
//
//   0  done        1  failed (the database refused or is out of reach, no such job, declined)
//   2  usage       (an unknown command or option, a bad argument: nothing was changed)
//
// The connection string is never printed; errors show it with its password masked.
import { commandDatabaseUrl } from './database-url.ts';
import { createInterface } from 'node:readline/promises';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { guardPool } from '../db/connections.ts';
import { JOB_STATUSES, type JobStatus, KIND_PATTERN, KIND_PATTERN_MESSAGE } from '../db/schema.ts';
import { libpqUrl, redactUrl, safeErrorMessage } from '../db/url.ts';
import { jobJson, jobSummaryJson, stepJson } from '../http/job-json.ts';
import { EventValidationError, sendEvent } from '../workflows/events.ts';
import { prepareEnqueue } from '../jobs/enqueue.ts';
import { createDefaultRegistry } from '../jobs/index.ts';
import { JOB_FLAGS, jobFlagOptions, jobOptionsFromFlags } from './job-flags.ts';
import {
  type Db,
  cancel,
  deleteDeadJobs,
  deleteJob,
  getJob,
  isJobId,
  listGroupLimits,
  listJobs,
  listKinds,
  listScheduleStates,
  loadSteps,
  pauseKind,
  resumeKind,
  retryDead,
  retryDeadJobs,
  retryFromStep,
  deleteSubscription,
  listSubscriptions,
  type ScheduleState,
  stats,
} from '../queries/index.ts';
import { type Column, formatAge, formatDate, record, table } from './output.ts';
import { MAX_LISTED, OPERATOR_USAGE as USAGE, type OperatorCommand, operatorCommandHelp } from './usage.ts';
import { PgdrainError } from '../errors.ts';

/** The built-in kinds, for what they hide of a payload (the webhook kind's header values): the
 * commands show jobs as the API does. */
const shownKinds = createDefaultRegistry({});

/** A mistake in the command line: exit 2, nothing changed. */
export class UsageError extends PgdrainError {
  readonly code = 'usage';
}
/** The command could not do what was asked: exit 1. */
export class CommandFailed extends PgdrainError {
  readonly code = 'command_failed';
}

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | undefined>;

interface Io {
  out: (text: string) => void;
  /** Asks on the terminal; false when declined. */
  confirm: (question: string) => Promise<boolean>;
  interactive: boolean;
}

interface Command {
  usage: string;
  options: Options;
  /** How many positional arguments it takes. */
  positionals: [min: number, max: number];
  run: (db: Db, values: Values, positionals: string[], io: Io) => Promise<void>;
}

const json = { type: 'boolean' } as const;
const yes = { type: 'boolean', short: 'y' } as const;

export const OPERATOR_COMMANDS: Record<OperatorCommand, Command> = {
  stats: {
    usage: USAGE.stats,
    options: { json },
    positionals: [0, 0],
    run: showStats,
  },
  kinds: { usage: USAGE.kinds, options: { json }, positionals: [0, 0], run: showKinds },
  jobs: {
    usage: USAGE.jobs,
    options: { status: { type: 'string' }, kind: { type: 'string' }, limit: { type: 'string' }, json },
    positionals: [0, 0],
    run: showJobs,
  },
  job: { usage: USAGE.job, options: { json }, positionals: [1, 1], run: showJob },
  enqueue: {
    usage: USAGE.enqueue,
    options: jobFlagOptions,
    positionals: [1, 2],
    run: enqueueJob,
  },
  retry: {
    usage: USAGE.retry,
    options: { dead: { type: 'boolean' }, kind: { type: 'string' }, 'from-step': { type: 'string' }, yes },
    positionals: [0, 1],
    run: retry,
  },
  delete: {
    usage: USAGE.delete,
    options: { dead: { type: 'boolean' }, kind: { type: 'string' }, yes },
    positionals: [0, 1],
    run: remove,
  },
  pause: { usage: USAGE.pause, options: {}, positionals: [1, 1], run: pause },
  resume: { usage: USAGE.resume, options: {}, positionals: [1, 1], run: resume },
  cancel: {
    usage: USAGE.cancel,
    options: {},
    positionals: [1, 1],
    run: cancelJob,
  },
  'send-event': {
    usage: USAGE['send-event'],
    options: { id: { type: 'string' } },
    positionals: [2, 3],
    run: sendEventCommand,
  },
  unsubscribe: { usage: USAGE.unsubscribe, options: {}, positionals: [2, 2], run: unsubscribeCommand },
  workflows: {
    usage: USAGE.workflows,
    options: { jobs: { type: 'string' }, json },
    positionals: [1, 1],
    run: workflowsCommand,
  },
};

/** `pgdrain workflows check --jobs FILE`: cli/workflows-check.ts. */
async function workflowsCommand(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  if (positionals[0] !== 'check') throw new UsageError(`unknown workflows command ${JSON.stringify(positionals[0])}`);
  if (typeof values.jobs !== 'string') throw new UsageError('--jobs <module> names the definitions to check');
  const { checkWorkflowsCommand } = await import('./workflows-check.ts');
  const { ok, summary } = await checkWorkflowsCommand(db, values.jobs, { json: values.json === true, out: io.out });
  if (!ok) throw new CommandFailed(summary);
}

/** Runs `pgdrain <name> …args`; resolves with the exit code. */
export async function runOperatorCommand(
  name: OperatorCommand,
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const command = OPERATOR_COMMANDS[name]!;
  let values: Values;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: [...args],
      allowPositionals: true,
      strict: true,
      options: { ...command.options, help: { type: 'boolean', short: 'h' } },
    }));
  } catch (error) {
    return usage(name, safeErrorMessage(error));
  }
  if (values.help) {
    process.stdout.write(operatorCommandHelp(name));
    return 0;
  }
  const [min, max] = command.positionals;
  if (positionals.length < min) return usage(name, 'missing argument');
  if (positionals.length > max) return usage(name, `unexpected argument ${JSON.stringify(positionals[max])}`);
  const url = await commandDatabaseUrl(env);
  if (!url)
    return usage(
      name,
      'set DATABASE_URL to the database to use, e.g. DATABASE_URL=postgres://user:pass@host/db (in the folder ' +
        'where `npm start` runs its embedded PostgreSQL, the command finds it)',
    );

  const pool = guardPool(
    new pg.Pool({
      connectionString: libpqUrl(url),
      max: 1,
      application_name: `pgdrain ${name}`,
      connectionTimeoutMillis: 10_000,
    }),
  );
  pool.on('error', () => {}); // an idle client lost while we exit
  const io: Io = {
    out: (text) => process.stdout.write(`${text}\n`),
    confirm,
    interactive: Boolean(process.stdin.isTTY && process.stdout.isTTY),
  };
  try {
    await command.run(drizzle({ client: pool }) as unknown as Db, values, positionals, io);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) return usage(name, error.message);
    const message = error instanceof CommandFailed ? error.message : `${redactUrl(url)}: ${safeErrorMessage(error)}`;
    process.stderr.write(`pgdrain ${name}: ${oneLine(message)}\n`);
    return 1;
  } finally {
    await pool.end().catch(() => {});
  }
}

function usage(name: OperatorCommand, message: string): number {
  process.stderr.write(`pgdrain ${name}: ${oneLine(message)} (usage: ${OPERATOR_COMMANDS[name]!.usage})\n`);
  return 2;
}

const oneLine = (text: string) => text.replace(/\s*\n\s*/g, ' ');

async function confirm(question: string): Promise<boolean> {
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(`${question} [y/N] `)).trim());
  } finally {
    prompt.close();
  }
}

// --- arguments -------------------------------------------------------------------------------------

function jobId(text: string | undefined): string {
  if (text === undefined || !isJobId(text))
    throw new UsageError(`${JSON.stringify(text ?? '')} is not a job id (a positive whole number)`);
  return text;
}

function kindName(text: unknown, what = 'kind'): string {
  if (typeof text !== 'string' || !KIND_PATTERN.test(text))
    throw new UsageError(`${what} ${JSON.stringify(text)} is not a job kind: ${KIND_PATTERN_MESSAGE}`);
  return text;
}

function wholeNumber(text: unknown, name: string, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (typeof text !== 'string' || !/^-?\d+$/.test(text) || n < min || n > max)
    throw new UsageError(`--${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(text)}`);
  return n;
}

function payloadOf(text: string | undefined): unknown {
  if (text === undefined) return {};
  let payload: unknown;
  try {
    payload = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`the payload is not JSON: ${safeErrorMessage(error)}`);
  }
  if (text.includes('\\u0000'))
    throw new UsageError('the payload contains the NUL character (\\u0000), which PostgreSQL cannot store');
  return payload;
}

/** The bulk form (--dead) or one id, never both. */
function target(values: Values, positionals: string[]): { dead: true; kind?: string } | { dead: false; id: string } {
  if (values.dead) {
    if (positionals.length > 0) throw new UsageError('give a job id or --dead, not both');
    return { dead: true, kind: values.kind === undefined ? undefined : kindName(values.kind) };
  }
  if (values.kind !== undefined) throw new UsageError('--kind goes with --dead');
  return { dead: false, id: jobId(positionals[0]) };
}

async function confirmed(io: Io, values: Values, question: string): Promise<void> {
  if (values.yes) return;
  if (!io.interactive)
    throw new UsageError('this asks for confirmation on a terminal; pass --yes to do it from a script');
  if (!(await io.confirm(question))) throw new CommandFailed('nothing was changed');
}

// --- commands --------------------------------------------------------------------------------------

async function showStats(db: Db, values: Values, _: string[], io: Io): Promise<void> {
  const [queue, schedules, groupLimits, subscriptions] = await Promise.all([
    stats(db),
    listScheduleStates(db),
    listGroupLimits(db, undefined, 20),
    listSubscriptions(db),
  ]);
  const scheduleRows = [...schedules.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  if (values.json) {
    const states = scheduleRows.map((s) => ({
      name: s.name,
      lastEnqueuedAt: s.lastEnqueuedSlot?.toISOString() ?? null,
      skipped: s.skipped,
    }));
    const limits = Object.fromEntries(
      Object.entries(groupLimits).map(([kind, { count, keys }]) => [
        kind,
        { count, keys: keys.map(({ updatedAt: _, ...k }) => k) },
      ]),
    );
    const subscribed = subscriptions.map(({ event, kind }) => ({ event, kind }));
    return io.out(JSON.stringify({ ...queue, schedules: states, groupLimits: limits, subscriptions: subscribed }));
  }
  const kinds = Object.entries(queue.kinds).sort(([a], [b]) => (a < b ? -1 : 1));
  if (kinds.length === 0) io.out('The queue is empty.');
  else {
    type Row = (typeof kinds)[number];
    const count = (title: string, key: 'ready' | 'delayed' | 'running' | 'dead' | 'waiting'): Column<Row> => ({
      title,
      value: ([, s]) => s[key],
      right: true,
    });
    io.out(
      table(kinds, [
        { title: 'kind', value: ([kind]) => kind, flexible: true },
        count('ready', 'ready'),
        count('delayed', 'delayed'),
        count('running', 'running'),
        count('dead', 'dead'),
        count('waiting', 'waiting'),
        { title: 'paused', value: ([, s]) => (s.paused ? 'yes' : 'no') },
        { title: 'oldest ready', value: ([, s]) => formatAge(s.oldestReadySeconds), right: true },
      ]),
    );
    // Workflows after a deploy: runs held by a change of their code, and runs per version (a
    // version not listed has no live job left and may be deleted).
    for (const [kind, s] of kinds) {
      if (s.held > 0)
        io.out(
          `${kind}: ${s.held} held, their code departs from their history ` +
            `(pgdrain jobs --kind ${kind} --status waiting; pgdrain job <id> says why)`,
        );
      if (s.versions)
        io.out(
          `${kind} by version: ${Object.entries(s.versions)
            .map(([v, n]) => `v${v} ${n}`)
            .join(', ')}`,
        );
    }
  }
  showStatsTables(io, scheduleRows, subscriptions, groupLimits);
}

async function showKinds(db: Db, values: Values, _: string[], io: Io): Promise<void> {
  const kinds = await listKinds(db);
  if (values.json) {
    for (const k of kinds)
      io.out(
        JSON.stringify({
          kind: k.kind,
          version: k.version,
          options: k.options,
          writtenBy: k.writtenBy,
          writtenAt: k.writtenAt.toISOString(),
        }),
      );
    return;
  }
  if (kinds.length === 0) return io.out('No drainer has written its kinds yet (each writes them when it starts).');
  const shown = (options: Record<string, unknown>) =>
    Object.entries(options)
      .map(([key, value]) => `${key} ${typeof value === 'object' ? JSON.stringify(value) : String(value)}`)
      .join(', ');
  io.out(
    table(kinds, [
      { title: 'kind', value: (k) => k.kind },
      { title: 'version', value: (k) => k.version, right: true },
      { title: 'options', value: (k) => shown(k.options) || '–', flexible: true },
      { title: 'written by', value: (k) => k.writtenBy },
      { title: 'at', value: (k) => formatDate(k.writtenAt) },
    ]),
  );
}

/** pgdrain stats' tables after the kinds': schedules, subscriptions, group keys with their own limits. */
function showStatsTables(
  io: Io,
  scheduleRows: ScheduleState[],
  subscriptions: Awaited<ReturnType<typeof listSubscriptions>>,
  groupLimits: Awaited<ReturnType<typeof listGroupLimits>>,
): void {
  const limitRows = Object.entries(groupLimits).flatMap(([kind, { keys }]) => keys.map((k) => ({ kind, ...k })));
  if (scheduleRows.length > 0) {
    io.out('');
    io.out(
      table(scheduleRows, [
        { title: 'schedule', value: (s) => s.name, flexible: true },
        { title: 'last enqueued', value: (s) => (s.lastEnqueuedSlot ? formatDate(s.lastEnqueuedSlot) : 'never') },
        { title: 'skipped', value: (s) => s.skipped, right: true },
      ]),
    );
  }
  if (subscriptions.length > 0) {
    io.out('');
    io.out(
      table(subscriptions, [
        { title: 'event', value: (s) => s.event, flexible: true },
        { title: 'subscribed kind', value: (s) => s.kind, flexible: true },
        { title: 'since', value: (s) => formatDate(s.subscribedAt) },
      ]),
    );
  }
  if (limitRows.length > 0) {
    io.out('');
    io.out(
      table(limitRows, [
        { title: 'kind', value: (r) => r.kind },
        { title: 'group key with its own limits', value: (r) => r.groupKey, flexible: true },
        { title: 'at once', value: (r) => r.concurrency ?? '–', right: true },
        {
          title: 'rate',
          value: (r) => (r.rateLimit ? `${r.rateLimit.limit} per ${r.rateLimit.periodSeconds} s` : '–'),
        },
      ]),
    );
    const more = Object.entries(groupLimits)
      .filter(([, g]) => g.count > g.keys.length)
      .map(([kind, g]) => `${kind}: ${g.count - g.keys.length} more`);
    if (more.length > 0) io.out(`(${more.join('; ')}: GET /stats or pgdrain stats --json)`);
  }
}

async function showJobs(db: Db, values: Values, _: string[], io: Io): Promise<void> {
  const status = values.status;
  if (status !== undefined && !(JOB_STATUSES as readonly unknown[]).includes(status)) {
    throw new UsageError(`--status ${JSON.stringify(status)} is not a status: use one of ${JOB_STATUSES.join(', ')}`);
  }
  const kind = values.kind === undefined ? undefined : kindName(values.kind);
  const limit = wholeNumber(values.limit, 'limit', 1, MAX_LISTED) ?? 50;
  const { jobs } = await listJobs(db, { status: status as JobStatus | undefined, kind, limit });
  if (values.json) {
    for (const job of jobs) io.out(JSON.stringify(jobSummaryJson(job, shownKinds)));
    return;
  }
  if (jobs.length === 0) return io.out('No jobs.');
  io.out(
    table(jobs, [
      { title: 'id', value: (j) => j.id, right: true },
      { title: 'kind', value: (j) => j.kind },
      { title: 'status', value: (j) => (j.status === 'running' && j.cancelRequestedAt ? 'cancelling' : j.status) },
      { title: 'tries', value: (j) => `${j.attempts}/${j.maxAttempts}`, right: true },
      { title: 'run at', value: (j) => j.runAt },
      { title: 'last error', value: (j) => j.lastError ?? '', flexible: true },
    ]),
  );
}

async function showJob(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  const id = jobId(positionals[0]);
  const job = await getJob(db, id);
  if (!job)
    throw new CommandFailed(`job ${id} does not exist (completed jobs are deleted unless their kind keeps them)`);
  const shown = jobJson(job, shownKinds);
  const steps = (await loadSteps(db, id)).map(stepJson);
  if (values.json) return io.out(JSON.stringify(steps.length > 0 ? { ...shown, steps } : shown));
  const { attemptLog, ...fields } = shown;
  io.out(
    record(
      Object.entries(fields).map(([key, value]) => [
        key,
        typeof value === 'string' && /At$/.test(key) && value ? formatDate(new Date(value)) : value,
      ]),
    ),
  );
  // Each attempt that failed or was lost: when, for how long, on which drainer, then its error's lines.
  for (const a of attemptLog ?? []) {
    const took = a.startedAt ? ` (${((Date.parse(a.endedAt) - Date.parse(a.startedAt)) / 1000).toFixed(1)} s)` : '';
    const started = a.startedAt ? formatDate(new Date(a.startedAt)) : 'at an unknown time';
    io.out(
      `${a === attemptLog![0] ? '\n' : ''}attempt ${a.attempt} ${a.outcome} ${started}${took} on ${a.drainer ?? '?'}`,
    );
    io.out(a.error.replace(/^/gm, '  '));
  }
  if (steps.length === 0) return;
  io.out('');
  io.out(
    table(steps, [
      { title: 'step', value: (s) => s.name },
      { title: 'status', value: (s) => s.status },
      { title: 'tries', value: (s) => String(s.attempts), right: true },
      { title: 'started', value: (s) => formatDate(new Date(s.startedAt)) },
      { title: 'finished', value: (s) => (s.finishedAt ? formatDate(new Date(s.finishedAt)) : '') },
      {
        title: 'result, error or what it waits for',
        value: (s) =>
          s.status === 'sleeping'
            ? `until ${formatDate(new Date(s.wakeAt!))}`
            : s.status === 'waiting'
              ? s.childId
                ? `job ${s.childId}`
                : `event ${s.event} (${s.key})${s.match ? ` matching ${JSON.stringify(s.match)}` : ''}${
                    s.wakeAt ? ` until ${formatDate(new Date(s.wakeAt))}` : ''
                  }`
              : s.status === 'failed'
                ? `${s.error ?? ''}${s.wakeAt ? ` (tries again at ${formatDate(new Date(s.wakeAt))})` : ''}`
                : JSON.stringify(s.result),
        flexible: true,
      },
    ]),
  );
}

async function sendEventCommand(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  let sent;
  try {
    const [event, key, payload] = [positionals[0]!, positionals[1]!, payloadOf(positionals[2])];
    const id = typeof values.id === 'string' ? values.id : undefined;
    sent = await sendEvent(db, { event, key, payload, ...(id === undefined ? {} : { id }) });
  } catch (error) {
    if (error instanceof EventValidationError) throw new UsageError(error.message);
    throw error;
  }
  io.out(sent.id);
}

async function enqueueJob(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  const kind = kindName(positionals[0]);
  const payload = payloadOf(positionals[1]);
  let prepared;
  try {
    // The built-in kinds are checked now; any other is stored as given and checked when it runs.
    prepared = prepareEnqueue([{ kind, payload, ...jobOptionsFromFlags(values) }], {
      registry: shownKinds,
      unknownKinds: 'store',
    });
  } catch (error) {
    throw new UsageError(flagNames(error instanceof Error ? error.message : String(error)));
  }
  const [job] = await prepared.send(db);
  io.out(job!.id);
  if (job!.deduplicated)
    process.stderr.write(
      `pgdrain enqueue: a job with that dedupe key exists (${job!.status}): its id is printed, nothing was enqueued\n`,
    );
}

/** A refusal as the command line says it: options by their flags (`priority` → `--priority`). */
function flagNames(message: string): string {
  return JOB_FLAGS.reduce(
    (text, f) => text.replace(new RegExp(`(^|[\\s;(])${f.option}\\b`, 'g'), `$1--${f.flag}`),
    message,
  );
}

async function retry(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  const which = target(values, positionals);
  if (which.dead) {
    await confirmed(io, values, `Retry every dead job${which.kind ? ` of ${which.kind}` : ''}?`);
    const { count } = await retryDeadJobs(db, { kind: which.kind });
    return io.out(`${count} dead job${count === 1 ? ' is' : 's are'} pending again`);
  }
  const fromStep = values['from-step'];
  if (typeof fromStep === 'string') return retryFrom(db, which.id, fromStep, io);
  const result = await retryDead(db, which.id);
  if (result.outcome === 'not_found') throw new CommandFailed(`job ${which.id} does not exist`);
  if (result.outcome === 'not_dead')
    throw new CommandFailed(`job ${which.id} is ${result.status}; only dead jobs can be retried`);
  io.out(`job ${which.id} is pending again`);
}

/** pgdrain retry <id> --from-step NAME: a finished workflow run again from that step. */
async function retryFrom(db: Db, id: string, fromStep: string, io: Io): Promise<void> {
  const result = await retryFromStep(db, id, fromStep);
  if (result.outcome === 'not_found') throw new CommandFailed(`job ${id} does not exist`);
  if (result.outcome === 'live')
    throw new CommandFailed(`job ${id} is ${result.status}; a run is restarted from a step once it has finished`);
  if (result.outcome === 'unknown_step') {
    const known = result.steps.length > 0 ? `its steps: ${result.steps.join(', ')}` : 'it has no steps';
    throw new CommandFailed(`job ${id} has no step named ${JSON.stringify(fromStep)}; ${known}`);
  }
  io.out(`job ${id} is pending again, from step ${fromStep}`);
}

async function remove(db: Db, values: Values, positionals: string[], io: Io): Promise<void> {
  const which = target(values, positionals);
  if (which.dead) {
    await confirmed(
      io,
      values,
      `Delete every dead job${which.kind ? ` of ${which.kind}` : ''}? This cannot be undone.`,
    );
    const { count } = await deleteDeadJobs(db, { kind: which.kind });
    return io.out(`${count} dead job${count === 1 ? '' : 's'} deleted`);
  }
  await confirmed(io, values, `Delete job ${which.id}? This cannot be undone.`);
  const result = await deleteJob(db, which.id);
  if (result.outcome === 'not_found') throw new CommandFailed(`job ${which.id} does not exist`);
  if (result.outcome === 'running')
    throw new CommandFailed(
      `job ${which.id} is running; cancel it (pgdrain cancel ${which.id}) or wait until it settles`,
    );
  io.out(`job ${which.id} deleted`);
}

async function pause(db: Db, _: Values, positionals: string[], io: Io): Promise<void> {
  const kind = kindName(positionals[0]);
  const changed = await pauseKind(db, kind);
  io.out(changed ? `${kind} is paused: no drainer claims it until it is resumed` : `${kind} was already paused`);
}

async function resume(db: Db, _: Values, positionals: string[], io: Io): Promise<void> {
  const kind = kindName(positionals[0]);
  const changed = await resumeKind(db, kind);
  io.out(changed ? `${kind} is resumed` : `${kind} was not paused`);
}

async function unsubscribeCommand(db: Db, _: Values, positionals: string[], io: Io): Promise<void> {
  const [kind, event] = positionals as [string, string];
  if (!(await deleteSubscription(db, kind, event)))
    throw new CommandFailed(`kind ${kind} has no subscription to event ${event}`);
  io.out(`kind ${kind} no longer subscribes to ${event}`);
}

async function cancelJob(db: Db, _: Values, positionals: string[], io: Io): Promise<void> {
  const id = jobId(positionals[0]);
  const result = await cancel(db, id);
  if (result.outcome === 'not_found') throw new CommandFailed(`job ${id} does not exist`);
  if (result.outcome === 'not_cancellable')
    throw new CommandFailed(`job ${id} is ${result.status}; only a pending, waiting or running job can be cancelled`);
  io.out(
    result.outcome === 'cancelling'
      ? `job ${id} is running: its drainer stops it, and it ends cancelled`
      : `job ${id} is cancelled`,
  );
}
