// The kinds every deployment ships. Add your own with defineJob and pass them to the registry.
import { noopJob } from './noop.ts';
import { JobRegistry, type JobDefinition } from './registry.ts';
import { createWebhookJob, parseAllowedHosts } from './webhook.ts';

export * from './registry.ts';
export { noopJob } from './noop.ts';
export { createWebhookJob, parseAllowedHosts, isHostAllowed } from './webhook.ts';

/** noop + webhook (hosts from WEBHOOK_ALLOWED_HOSTS) + whatever kinds you add. */
export function createDefaultRegistry(env: { WEBHOOK_ALLOWED_HOSTS?: string }, extra: readonly JobDefinition<any>[] = []): JobRegistry {
  return new JobRegistry([noopJob, createWebhookJob({ allowedHosts: parseAllowedHosts(env.WEBHOOK_ALLOWED_HOSTS) }), ...extra]);
}
