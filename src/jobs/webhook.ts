// webhook: delivers a JSON body to an allowed URL, signed as Standard Webhooks says when signing
// keys are set (webhook-signature.ts). 2xx completes; 5xx, 408, 429, timeouts and
// network errors retry with backoff; any other status is permanent (dead, status in last_error).
// Where it may deliver is the allow-list's to say (webhook-targets.ts: hosts, ports, and the
// addresses they resolve to), checked at enqueue and again at delivery, with the address checked
// being the one dialled (webhook-delivery.ts); redirects are not followed. A refused delivery sends
// nothing and says "not allowed", so it cannot tell an enqueuer whether a port answers.
import { safeErrorMessage } from '../db/url.ts';
import { z } from 'zod';
import { PermanentJobError, RetryLaterError, defineJob } from './registry.ts';
import { type ResolveHost, WebhookRefusedError, webhookSender } from './webhook-delivery.ts';
import { createSigner } from './webhook-signature.ts';
import { AllowList, checkTarget } from './webhook-targets.ts';

export interface WebhookOptions {
  /** WEBHOOK_ALLOWED_HOSTS' entries: host names, `*.example.com` for any subdomain of
   * example.com, `host:port` for a port other than 80 and 443, and addresses or CIDR ranges
   * (`10.0.0.5`, `10.0.0.0/8`, `[::1]:9000`) for targets on loopback or private networks. Empty:
   * every URL refused. */
  allowedHosts: readonly string[];
  /** Default 10 s; also the most a job may ask for (its maxTimeoutMs), unless maxTimeoutMs says more. */
  timeoutMs?: number;
  maxTimeoutMs?: number;
  maxAttempts?: number;
  /** Keys to sign every delivery with (Standard Webhooks; see webhook-signature.ts): what
   * parseSigningSecrets() reads from WEBHOOK_SIGNING_SECRET. None: deliveries are unsigned. */
  signingKeys?: readonly Uint8Array[];
  /** Sends through this fetch instead (tests, embedders); default node:http(s) on Node, the
   * runtime's fetch on Workers. */
  fetch?: typeof fetch;
  /** Node only: resolves a host for its delivery; default node:dns lookup. */
  resolve?: ResolveHost;
}

/** Parses WEBHOOK_ALLOWED_HOSTS ("a.example.com, *.hooks.example.org, 10.0.0.0/8"). */
export function parseAllowedHosts(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
}

/** The host name (not its port or addresses) is named by the list. */
export function isHostAllowed(hostname: string, allowedHosts: readonly string[]): boolean {
  return new AllowList(allowedHosts).namesHost(hostname.toLowerCase().replace(/\.$/, ''));
}

/** Set by pgdrain: the transport's, and the signature's (see webhook-signature.ts). */
const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
]);
/** What a header value shown by the API or the CLI reads instead of its value. */
export const REDACTED = '[redacted]';

/** A webhook job's payload, its URL checked against the allow-list. */
function webhookPayload(list: AllowList) {
  return z.strictObject({
    url: z
      .string()
      .max(8192)
      .superRefine((value, ctx) => {
        const checked = checkTarget(value, list);
        if ('problem' in checked) ctx.addIssue({ code: 'custom', message: checked.problem });
      }),
    method: z.enum(['POST', 'PUT']).default('POST'),
    headers: z
      .record(
        z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'not a valid header name'),
        // Visible ASCII and tabs: what every runtime sends as it was written. HTTP allows U+0080 to
        // U+00FF as opaque bytes, but fetch and node:http send them as UTF-8 (`é` arrives as `Ã©`).
        z
          .string()
          .max(8192)
          .regex(
            /^[\t\x20-\x7e]*$/,
            'a header value holds tabs and visible ASCII (U+0020 to U+007E): no CR, LF, NUL or other ' +
              'control character, nothing above U+007E (percent-encode or base64 other text)',
          ),
      )
      .refine(
        (h) => Object.keys(h).every((k) => !isPgdrainHeader(k)),
        `${[...FORBIDDEN_HEADERS].join(', ')} and x-pgdrain-* are set by pgdrain`,
      )
      .optional(),
    // Any JSON: the API has checked the body's JSON already (src/http/input.ts), in linear time.
    body: z.unknown().optional(),
  });
}

/** A header pgdrain sets itself (in any case): a payload may not set it. */
const isPgdrainHeader = (name: string) =>
  FORBIDDEN_HEADERS.has(name.toLowerCase()) || name.toLowerCase().startsWith('x-pgdrain-');

export function createWebhookJob(options: WebhookOptions) {
  const list = new AllowList(options.allowedHosts);
  const schema = webhookPayload(list);
  const send = webhookSender(list, { fetch: options.fetch, resolve: options.resolve });
  const signer = createSigner(options.signingKeys ?? []);

  return defineJob({
    kind: 'webhook',
    schema,
    timeoutMs: options.timeoutMs ?? 10_000,
    maxTimeoutMs: options.maxTimeoutMs,
    maxAttempts: options.maxAttempts ?? 8,
    // Header values are often credentials meant for the receiver: nobody reading the job sees them.
    redactPayload: (payload) => {
      const headers = (payload as { headers?: unknown } | null)?.headers;
      if (!headers || typeof headers !== 'object') return payload;
      return { ...(payload as object), headers: Object.fromEntries(Object.keys(headers).map((k) => [k, REDACTED])) };
    },
    handler: async (payload, { signal, job }) => {
      const target = checkTarget(payload.url, list);
      if ('problem' in target) throw new PermanentJobError(target.problem);
      const body = JSON.stringify(payload.body ?? null);
      // The same webhook-id for every attempt of the job: a receiver deduplicates retries on it.
      const signature = signer ? await signer.headers(`msg_${job.id}`, body) : {};
      let answer;
      try {
        answer = await send(target, {
          method: payload.method,
          headers: {
            'content-type': 'application/json',
            'user-agent': 'pgdrain-webhook',
            // The payload's may not name pgdrain's own (its schema refuses them, at enqueue and here).
            ...payload.headers,
            'x-pgdrain-job-id': job.id,
            'x-pgdrain-attempt': String(job.attempts),
            ...signature,
          },
          body,
          signal,
        });
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        if (error instanceof WebhookRefusedError) throw new PermanentJobError(error.message);
        throw new Error(`webhook request failed: ${safeErrorMessage(error)}`);
      }
      if (answer.status >= 200 && answer.status < 300) return;
      const what = `webhook ${payload.method} ${target.url.host} answered HTTP ${answer.status}`;
      if (answer.status === 429 || answer.status === 408 || answer.status >= 500) {
        const retryAfter = Number(answer.retryAfter);
        if (Number.isFinite(retryAfter) && retryAfter > 0) throw new RetryLaterError(what, retryAfter);
        throw new Error(what);
      }
      throw new PermanentJobError(
        answer.status >= 300 && answer.status < 400 ? `${what} (redirects are not followed)` : what,
      );
    },
  });
}
