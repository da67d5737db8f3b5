// Webhook deliveries signed as the Standard Webhooks specification says (standardwebhooks.com), so a
// receiver can tell pgdrain's delivery from anyone who learned the URL, and a retry from a replay:
//   webhook-id         the same for every attempt of one job (receivers deduplicate on it)
//   webhook-timestamp  seconds since the epoch, at this attempt (receivers refuse old ones)
//   webhook-signature  `v1,` + base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`, one per secret,
//                      space-separated (several secrets at once: rotation without a gap)
// Secrets are `whsec_` + base64 of the key (WEBHOOK_SIGNING_SECRET, whitespace- or comma-separated).
// WebCrypto only: the same code signs on Node and on Workers.

const SECRET_PREFIX = 'whsec_';
/** The specification asks for keys of 24 to 64 bytes. */
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;

/** The keys in WEBHOOK_SIGNING_SECRET; throws naming the entry (by position, never its value) that is unusable. */
export function parseSigningSecrets(value: string | undefined): Uint8Array[] {
  const entries = (value ?? '').split(/[\s,]+/).filter(Boolean);
  return entries.map((entry, i) => {
    const where = `secret ${i + 1} of ${entries.length}`;
    if (!entry.startsWith(SECRET_PREFIX)) throw new Error(`${where} does not start with ${SECRET_PREFIX}`);
    let key: Uint8Array;
    try {
      key = Uint8Array.from(atob(entry.slice(SECRET_PREFIX.length)), (c) => c.charCodeAt(0));
    } catch {
      throw new Error(`${where} is not base64 after ${SECRET_PREFIX}`);
    }
    if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES)
      throw new Error(`${where} is ${key.length} bytes; use ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES}`);
    return key;
  });
}

export interface WebhookSigner {
  /** The three headers for one delivery of `body`. */
  headers(
    id: string,
    body: string,
    now?: Date,
  ): Promise<Record<'webhook-id' | 'webhook-timestamp' | 'webhook-signature', string>>;
}

export function createSigner(keys: readonly Uint8Array[]): WebhookSigner | null {
  if (keys.length === 0) return null;
  const imported = Promise.all(
    keys.map((key) =>
      crypto.subtle.importKey('raw', key as Uint8Array<ArrayBuffer>, { name: 'HMAC', hash: 'SHA-256' }, false, [
        'sign',
      ]),
    ),
  );
  const encoder = new TextEncoder();
  return {
    async headers(id, body, now = new Date()) {
      const timestamp = String(Math.floor(now.getTime() / 1000));
      const content = encoder.encode(`${id}.${timestamp}.${body}`);
      const signatures = await Promise.all(
        (await imported).map(async (key) => `v1,${toBase64(await crypto.subtle.sign('HMAC', key, content))}`),
      );
      return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signatures.join(' ') };
    },
  };
}

function toBase64(bytes: ArrayBuffer): string {
  let binary = '';
  for (const byte of new Uint8Array(bytes)) binary += String.fromCharCode(byte);
  return btoa(binary);
}
