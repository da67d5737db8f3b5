// The CLI's `--jobs ./jobs.js`: your job kinds (and recurring schedules) from a module of your
// own, so a self-hosted user runs `npx pgdrain start --jobs ./jobs.js` instead of forking. The
// module may export what defineJob() and defineSchedule() return as the default export (alone or
// in an array), as named exports, or both.
import { safeErrorMessage } from '../db/url.ts';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { JobDefinition } from '../jobs/index.ts';
import type { ScheduleDefinition } from '../schedules.ts';

export async function loadJobsModule(
  modulePath: string,
): Promise<{ jobs: JobDefinition<any>[]; schedules: ScheduleDefinition[] }> {
  const url = pathToFileURL(path.resolve(modulePath)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`could not load the jobs module ${modulePath}: ${safeErrorMessage(error)}`);
  }
  const jobs = new Set<JobDefinition<any>>();
  const schedules = new Set<ScheduleDefinition>();
  for (const value of Object.values(module).flatMap((v) => (Array.isArray(v) ? v : [v]))) {
    if (isJobDefinition(value)) jobs.add(value);
    else if (isScheduleDefinition(value)) schedules.add(value);
  }
  if (jobs.size === 0 && schedules.size === 0) {
    throw new Error(
      `the jobs module ${modulePath} exports no job kinds: export what defineJob() returns (default or named, alone ` +
        `or in an array)`,
    );
  }
  return { jobs: [...jobs], schedules: [...schedules] };
}

function isScheduleDefinition(value: unknown): value is ScheduleDefinition {
  const v = value as Partial<ScheduleDefinition> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.name === 'string' &&
    typeof v.cron === 'string' &&
    typeof v.kind === 'string'
  );
}

function isJobDefinition(value: unknown): value is JobDefinition<any> {
  const v = value as Partial<JobDefinition> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.kind === 'string' &&
    typeof v.handler === 'function' &&
    typeof v.schema === 'object'
  );
}
