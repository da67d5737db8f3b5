// `pgdrain enqueue`'s flags, one per job option of the one options schema (src/jobs/job-options.ts):
// `--run-at`, `--max-attempts`, `--dedupe-key`, … (the option's name in kebab case), each read as
// its schema's type — a number, an ISO-8601 date, a comma-separated list, text — and then checked
// by the enqueue pipeline like every other way in.
import { JOB_OPTIONS, type EnqueueOptions, type JobOptionName } from '../jobs/job-options.ts';

const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

type Kind = 'number' | 'date' | 'list' | 'text';
/** How a flag's text becomes the option's value, from its schema's type. */
const kindOf = (name: JobOptionName): Kind => {
  const type = (JOB_OPTIONS[name] as { def: { type: string } }).def.type;
  return type === 'number' ? 'number' : type === 'date' ? 'date' : type === 'array' ? 'list' : 'text';
};
const PLACEHOLDER: Record<Kind, string> = { number: 'N', date: 'ISO', list: 'ID,ID', text: 'TEXT' };

export const JOB_FLAGS = (Object.keys(JOB_OPTIONS) as JobOptionName[]).map((option) => ({
  option,
  flag: kebab(option),
  kind: kindOf(option),
}));

/** For parseArgs. */
export const jobFlagOptions = Object.fromEntries(JOB_FLAGS.map((f) => [f.flag, { type: 'string' as const }]));

/** `[--run-at ISO] [--max-attempts N] …`, for the usage line. */
export const jobFlagsUsage = JOB_FLAGS.map((f) => `[--${f.flag} ${PLACEHOLDER[f.kind]}]`).join(' ');

/** The options the flags give; throws a message naming the flag when one cannot be read. */
export function jobOptionsFromFlags(values: Record<string, unknown>): EnqueueOptions {
  const options: Record<string, unknown> = {};
  for (const { option, flag, kind } of JOB_FLAGS) {
    const text = values[flag];
    if (text === undefined) continue;
    if (typeof text !== 'string') throw new Error(`--${flag} takes a value`);
    options[option] = read(kind, text, flag);
  }
  return options as EnqueueOptions;
}

function read(kind: Kind, text: string, flag: string): unknown {
  if (kind === 'number') {
    if (!/^-?\d+$/.test(text)) throw new Error(`--${flag} must be a whole number, not ${JSON.stringify(text)}`);
    return Number(text);
  }
  if (kind === 'date') {
    const date = new Date(text);
    if (Number.isNaN(date.getTime()) || !/^\d{4}-\d\d-\d\d/.test(text))
      throw new Error(`--${flag} ${JSON.stringify(text)} is not an ISO-8601 date and time`);
    return date;
  }
  return kind === 'list'
    ? text
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
    : text;
}
