// The operator's commands, their usage lines and what each does: data only, so that `--help`
// answers at once, without loading the database driver and Drizzle (operator.ts implements them).
import { JOB_STATUSES } from '../db/constants.ts';
import { jobFlagsUsage } from './job-flags.ts';

/** `pgdrain jobs --limit` at most. */
export const MAX_LISTED = 1000;
export const OPERATOR_USAGE = {
  stats: 'pgdrain stats [--json]',
  kinds: 'pgdrain kinds [--json]',
  jobs: 'pgdrain jobs [--status S] [--kind K] [--limit N] [--json]',
  job: 'pgdrain job <id> [--json]',
  enqueue: `pgdrain enqueue <kind> [payload-json] ${jobFlagsUsage}`,
  retry: 'pgdrain retry <id> [--from-step NAME] | pgdrain retry --dead [--kind K] [--yes]',
  delete: 'pgdrain delete <id> [--yes] | pgdrain delete --dead [--kind K] [--yes]',
  pause: 'pgdrain pause <kind>',
  resume: 'pgdrain resume <kind>',
  cancel: 'pgdrain cancel <id>',
  'send-event': 'pgdrain send-event <event> <key> [payload-json] [--id ID]',
  unsubscribe: 'pgdrain unsubscribe <kind> <event>',
  workflows: 'pgdrain workflows check --jobs <module> [--json]',
};

export type OperatorCommand = keyof typeof OPERATOR_USAGE;

export const isOperatorCommand = (name: string | undefined): name is OperatorCommand =>
  name !== undefined && Object.hasOwn(OPERATOR_USAGE, name);

const SUMMARY: Record<OperatorCommand, string> = {
  stats:
    "Per kind: ready, delayed, running, dead, waiting, paused, oldest ready; each schedule's last enqueued slot; " +
    'and the group keys with limits of their own.',
  kinds:
    'The kinds the drainers define, as the database keeps them (each drainer writes its kinds when it starts; the ' +
    'newest write wins): version, the options an enqueue by the name gets, who wrote it and when.',
  jobs:
    `Jobs, newest first (default 50, at most ${MAX_LISTED}); --json prints one JSON object per line. ` +
    `Statuses: ${JOB_STATUSES.join(', ')}.`,
  job:
    "One job, every field; a workflow's steps as a timeline (name, status, attempts, started, finished, result " +
    'or error).',
  enqueue:
    'Enqueues a job (payload default {}) and prints its id. Options as for enqueue() (--after takes ids separated ' +
    "by commas). The built-in kinds' payloads are checked now; any other kind's when it runs, as for " +
    'pgdrain.enqueue() in SQL.',
  retry:
    'A dead job (or every dead job, of a kind or all) back to pending, attempts reset; --from-step: a finished ' +
    'workflow run (dead, completed or cancelled) again from that step, the earlier steps kept. The bulk form asks ' +
    'first on a terminal; a script passes --yes.',
  delete: 'Deletes a job that is not running (or every dead job). Asks first on a terminal; a script passes --yes.',
  pause: 'No drainer claims the kind until it is resumed (enqueueing still works).',
  resume: 'Drainers claim the kind again.',
  cancel:
    'A pending or waiting job is cancelled at once; a running one is stopped by its drainer and ends cancelled. A ' +
    "workflow's unfinished children are cancelled with it.",
  'send-event':
    'Sends an event (payload default {}): every workflow run waiting on the event and key gets the payload and runs ' +
    "again, and every kind subscribed to the event (`on`) gets a job. Prints the event's id.",
  unsubscribe:
    "Removes a kind's subscription to an event (a kind retired after a deploy: its subscription is kept until " +
    'then). Later events no longer enqueue its jobs.',
  workflows:
    "Before a deploy: replays every workflow run in flight against the module's definitions, running and " +
    'writing nothing, and prints each run the new code would hold (the step, why) or fail, the counts per kind, and ' +
    'runs of versions the module no longer has. Exit 1 when any run would diverge or fail.',
};

/** `pgdrain <command> --help`. */
export function operatorCommandHelp(command: OperatorCommand): string {
  return (
    `Usage: ${OPERATOR_USAGE[command]}\n\n${SUMMARY[command]}\n\nNeeds DATABASE_URL. Exit codes: 0 done, 1 ` +
    `failed, 2 usage.\n`
  );
}
