// A job's options, written once: each one's bounds, default and meaning. Everything that takes
// them is built from this table: the typed enqueue's EnqueueOptions (and its check, in the enqueue
// pipeline), the HTTP contract's job fields (src/http/contract.ts) and the CLI's flags
// (src/cli/operator.ts). pgdrain.enqueue() in SQL takes the same options, with the same bounds
// (the migrations), which test/enqueue-paths.test.ts holds equal with one table of cases.
//
// A new option: a line here, its column in the enqueue statements (src/queries/enqueue/columns.ts),
// the migration that adds the column and pgdrain.enqueue()'s parameter, and a case in that test.
import { z } from 'zod';
import {
  JOB_TIMEOUT_BOUNDS_MS,
  MAX_ATTEMPTS_BOUNDS,
  MAX_DEDUPE_KEY_LENGTH,
  MAX_GROUP_KEY_LENGTH,
  PRIORITY_BOUNDS,
} from '../db/constants.ts';

/** An enqueue waits for at most this many jobs (`after`). */
export const MAX_AFTER = 100;
/** Job ids are PostgreSQL bigints, carried as decimal strings. */
export const JOB_ID_PATTERN = /^[1-9][0-9]{0,18}$/;
/** A job id PostgreSQL's bigint holds: the pattern, and at most 9223372036854775807. */
export function isJobId(id: string): boolean {
  return JOB_ID_PATTERN.test(id) && (id.length < 19 || id <= '9223372036854775807');
}
/** PostgreSQL's timestamptz has no year 0 ("0000-01-01" is refused): runAt stays in a sane range. */
export const RUN_AT_BOUNDS = { earliest: Date.UTC(1970, 0, 1), latest: Date.UTC(10000, 0, 1) } as const;

export const jobId = z
  .string()
  .regex(JOB_ID_PATTERN, 'must be a job id: a positive 64-bit integer as a decimal string')
  .refine(isJobId, 'must be a job id: a positive 64-bit integer as a decimal string')
  .meta({ description: 'A job id: a positive 64-bit integer as a decimal string.', example: '42' });

const { min: minTimeout, max: maxTimeout } = JOB_TIMEOUT_BOUNDS_MS;
/** A whole number within bounds; every refusal says the bounds. */
const wholeNumber = (min: number, max: number, unit = '') => {
  const error = `must be a whole number${unit} from ${min} to ${max}`;
  return z.int({ error }).min(min, error).max(max, error);
};
const text = (max: number) =>
  z
    .string({ error: `must be 1 to ${max} characters` })
    .min(1, `must be 1 to ${max} characters`)
    .max(max, `must be 1 to ${max} characters`);

/** The options, as the TypeScript API takes them; the HTTP contract and the CLI derive theirs. */
export const JOB_OPTIONS = {
  runAt: z
    .date({ error: 'must be a Date' })
    .refine(
      (d) => d.getTime() >= RUN_AT_BOUNDS.earliest && d.getTime() < RUN_AT_BOUNDS.latest,
      'must be between 1970-01-01 and 9999-12-31',
    )
    .meta({ description: 'When it may run; default now.' }),
  maxAttempts: wholeNumber(MAX_ATTEMPTS_BOUNDS.min, MAX_ATTEMPTS_BOUNDS.max).meta({
    description: "Attempts before the job goes dead; default its kind's, else 3.",
  }),
  dedupeKey: text(MAX_DEDUPE_KEY_LENGTH).meta({
    description: 'While a job with this key exists, enqueueing the key again returns that job instead.',
  }),
  dedupeMode: z.enum(['keep', 'replace'], { error: "must be 'keep' or 'replace'" }).meta({
    description:
      "With a dedupe key: 'keep' (default) returns the existing job as it is; 'replace' (debounce) gives a pending " +
      "job of the kind this payload and run time, or, when the key's job is running or dead, enqueues this one " +
      '(that job gives up the key).',
  }),
  priority: wholeNumber(PRIORITY_BOUNDS.min, PRIORITY_BOUNDS.max).meta({
    description: `Higher runs first (${PRIORITY_BOUNDS.min} to ${PRIORITY_BOUNDS.max}); default its kind's, else 0.`,
  }),
  groupKey: text(MAX_GROUP_KEY_LENGTH).meta({
    description:
      'Jobs of the kind with the same group key share its groupConcurrency (1 runs them one at a time, in order) ' +
      'and, where asked, its rate limit.',
  }),
  timeoutMs: wholeNumber(minTimeout, maxTimeout, ' of milliseconds').meta({
    description:
      `The handler's timeout for this job in milliseconds (${minTimeout} to ${maxTimeout}, and at most ` +
      `its kind's maxTimeoutMs); default its kind's.`,
  }),
  after: z
    .array(jobId, { error: `must list 1 to ${MAX_AFTER} job ids` })
    .min(1, `must list 1 to ${MAX_AFTER} job ids`)
    .max(MAX_AFTER, `must list 1 to ${MAX_AFTER} job ids`)
    .meta({
      description:
        `Ids of jobs (at most ${MAX_AFTER}) this one waits for: it stays \`waiting\` until every one of ` +
        `them has completed, and becomes dead if one ends dead or cancelled. Unknown ids are refused. Not with a ` +
        `dedupe key.`,
    }),
} as const;

export type JobOptionName = keyof typeof JOB_OPTIONS;

/** When and how a job runs; its kind's settings fill what is left unsaid. */
export type EnqueueOptions = { [K in JobOptionName]?: z.output<(typeof JOB_OPTIONS)[K]> };

// Not strict: a NewJob given by name carries settings of its kind's too (keepSeconds, …).
const optionsSchema = z.object(
  Object.fromEntries(Object.entries(JOB_OPTIONS).map(([k, s]) => [k, s.optional()])) as {
    [K in JobOptionName]: z.ZodOptional<(typeof JOB_OPTIONS)[K]>;
  },
);

/** Why these options cannot be taken (naming the option and its bound), or null. The one check
 * every way in applies; options that do not go together are its business too. */
export function optionsProblem(options: EnqueueOptions): string | null {
  // Most enqueues set no option at all, or only a few: only what is set is checked.
  let any = false;
  for (const key in options) if ((options as Record<string, unknown>)[key] !== undefined) any = true;
  if (!any) return null;
  const parsed = optionsSchema.safeParse(options);
  if (!parsed.success) {
    return parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.map(String).join('.') || 'options'} ${i.message}`)
      .join('; ');
  }
  if (options.dedupeMode !== undefined && options.dedupeKey === undefined) return 'dedupeMode needs a dedupeKey';
  if (options.after !== undefined && options.dedupeKey !== undefined)
    return 'a job that waits for others (after) cannot also have a dedupe key';
  return null;
}

/** The option's description, as the HTTP contract and the CLI's help show it. */
export const describeOption = (name: JobOptionName): string =>
  (JOB_OPTIONS[name].meta() as { description: string }).description;
