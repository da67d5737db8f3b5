// noop: does nothing, successfully. For benchmarks and smoke tests of a deployment.
import { z } from 'zod';
import { defineJob } from './registry.ts';

export const noopJob = defineJob({
  kind: 'noop',
  schema: z.unknown(),
  handler: () => {},
});
