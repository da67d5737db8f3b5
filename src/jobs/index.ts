// The kinds every deployment ships. Add your own with defineJob and pass them to the registry.
import { noopJob } from './noop.ts';
import { JobRegistry, type JobDefinition } from './registry.ts';
import { createWebhookJob, parseAllowedHosts } from './webhook.ts';
import { parseSigningSecrets } from './webhook-signature.ts';

export * from './registry.ts';
export { noopJob } from './noop.ts';
export { createWebhookJob, parseAllowedHosts, isHostAllowed } from './webhook.ts';
export { parseSigningSecrets } from './webhook-signature.ts';

/** noop + webhook (hosts from WEBHOOK_ALLOWED_HOSTS, deliveries signed with WEBHOOK_SIGNING_SECRET) +
 * whatever kinds you add. */
export function createDefaultRegistry(
  env: { WEBHOOK_ALLOWED_HOSTS?: string; WEBHOOK_SIGNING_SECRET?: string },
  extra: readonly JobDefinition<any>[] = [],
): JobRegistry {
  const webhook = createWebhookJob({
    allowedHosts: parseAllowedHosts(env.WEBHOOK_ALLOWED_HOSTS),
    signingKeys: parseSigningSecrets(env.WEBHOOK_SIGNING_SECRET),
  });
  return new JobRegistry([noopJob, webhook, ...extra]);
}
