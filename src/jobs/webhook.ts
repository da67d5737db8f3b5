// webhook: delivers a JSON body to an allowed URL, signed as Standard Webhooks says when signing
// keys are set (webhook-signature.ts). 2xx completes; 5xx, 408, 429, timeouts and
// network errors retry with backoff; any other status is permanent (dead, status in last_error).
// Hosts are checked against an allow-list at enqueue and again at delivery, and redirects are not
// followed, so the queue cannot be pointed at internal addresses.
import { safeErrorMessage } from '../db/url.ts';
import { z } from 'zod';
import { PermanentJobError, RetryLaterError, defineJob } from './registry.ts';
import { createSigner } from './webhook-signature.ts';

export interface WebhookOptions {
  /** Host names, or `*.example.com` for any subdomain of example.com. Empty: every URL refused. */
  allowedHosts: readonly string[];
  /** Default 10 s. */
  timeoutMs?: number;
  maxAttempts?: number;
  /** Keys to sign every delivery with (Standard Webhooks; see webhook-signature.ts): what
   * parseSigningSecrets() reads from WEBHOOK_SIGNING_SECRET. None: deliveries are unsigned. */
  signingKeys?: readonly Uint8Array[];
  /** For tests; default globalThis.fetch. */
  fetch?: typeof fetch;
}

/** Parses WEBHOOK_ALLOWED_HOSTS ("a.example.com, *.hooks.example.org"). */
export function parseAllowedHosts(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
}

export function isHostAllowed(hostname: string, allowedHosts: readonly string[]): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  return allowedHosts.some((pattern) =>
    pattern.startsWith('*.') ? host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1 : host === pattern,
  );
}

/** Set by pgdrain: the transport's, and the signature's (see webhook-signature.ts). */
const FORBIDDEN_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'webhook-id', 'webhook-timestamp', 'webhook-signature']);

export function createWebhookJob(options: WebhookOptions) {
  const allowed = options.allowedHosts.map((h) => h.toLowerCase());
  const hostProblem = (raw: string): string | null => {
    const url = new URL(raw);
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'url must use http or https';
    if (url.username || url.password) return 'url must not carry credentials; send them in headers';
    if (!isHostAllowed(url.hostname, allowed)) {
      return allowed.length === 0
        ? 'no webhook host is allowed: set WEBHOOK_ALLOWED_HOSTS (comma-separated, *.example.com patterns)'
        : `host ${url.hostname} is not in WEBHOOK_ALLOWED_HOSTS`;
    }
    return null;
  };
  const schema = z.strictObject({
    url: z.url().superRefine((value, ctx) => {
      const problem = hostProblem(value);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    }),
    method: z.enum(['POST', 'PUT']).default('POST'),
    headers: z
      .record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'not a valid header name'), z.string().max(8192))
      .refine((h) => Object.keys(h).every((k) => !FORBIDDEN_HEADERS.has(k.toLowerCase())), `${[...FORBIDDEN_HEADERS].join(', ')} are set by pgdrain`)
      .optional(),
    body: z.json().optional(),
  });
  const doFetch = options.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, init));
  const signer = createSigner(options.signingKeys ?? []);

  return defineJob({
    kind: 'webhook',
    schema,
    timeoutMs: options.timeoutMs ?? 10_000,
    maxAttempts: options.maxAttempts ?? 8,
    handler: async (payload, { signal, job }) => {
      const problem = hostProblem(payload.url);
      if (problem) throw new PermanentJobError(problem);
      const body = JSON.stringify(payload.body ?? null);
      // The same webhook-id for every attempt of the job: a receiver deduplicates retries on it.
      const signature = signer ? await signer.headers(`msg_${job.id}`, body) : {};
      let response: Response;
      try {
        response = await doFetch(payload.url, {
          method: payload.method,
          headers: {
            'content-type': 'application/json',
            'user-agent': 'pgdrain-webhook',
            'x-pgdrain-job-id': job.id,
            'x-pgdrain-attempt': String(job.attempts),
            ...payload.headers,
            ...signature,
          },
          body,
          redirect: 'manual',
          signal,
        });
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        throw new Error(`webhook request failed: ${safeErrorMessage(error)}`);
      }
      // The body is not needed; release the connection.
      await response.body?.cancel().catch(() => {});
      if (response.status >= 200 && response.status < 300) return;
      const what = `webhook ${payload.method} ${new URL(payload.url).host} answered HTTP ${response.status}`;
      if (response.status === 429 || response.status === 408 || response.status >= 500) {
        const retryAfter = Number(response.headers.get('retry-after'));
        if (Number.isFinite(retryAfter) && retryAfter > 0) throw new RetryLaterError(what, retryAfter);
        throw new Error(what);
      }
      throw new PermanentJobError(response.status >= 300 && response.status < 400 ? `${what} (redirects are not followed)` : what);
    },
  });
}
