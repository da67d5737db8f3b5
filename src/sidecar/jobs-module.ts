// The CLI's `--jobs ./jobs.js`: your job kinds from a module of your own, so a self-hosted user
// runs `npx pgdrain start --jobs ./jobs.js` instead of forking. The module may export its kinds
// as the default export (one kind or an array of them), as named exports, or both.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { JobDefinition } from '../jobs/index.ts';

export async function loadJobsModule(modulePath: string): Promise<JobDefinition<any>[]> {
  const url = pathToFileURL(path.resolve(modulePath)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`could not load the jobs module ${modulePath}: ${error instanceof Error ? error.message : String(error)}`);
  }
  const found = new Set<JobDefinition<any>>();
  for (const value of Object.values(module).flatMap((v) => (Array.isArray(v) ? v : [v]))) {
    if (isJobDefinition(value)) found.add(value);
  }
  if (found.size === 0) {
    throw new Error(`the jobs module ${modulePath} exports no job kinds: export what defineJob() returns (default or named, alone or in an array)`);
  }
  return [...found];
}

function isJobDefinition(value: unknown): value is JobDefinition<any> {
  const v = value as Partial<JobDefinition> | null;
  return typeof v === 'object' && v !== null && typeof v.kind === 'string' && typeof v.handler === 'function' && typeof v.schema === 'object';
}
