// The API's tokens and their scopes: what API_TOKENS holds, parsed. A module of its own so that the
// settings (src/settings.ts) and the app's context can use it without the access checks (auth.ts).
export const TOKEN_SCOPES = ['enqueue', 'read', 'admin'] as const;
export type TokenScope = (typeof TOKEN_SCOPES)[number];
export interface ScopedToken {
  scope: TokenScope;
  token: string;
}

/**
 * API_TOKENS: comma-separated `scope:token` pairs, e.g. `enqueue:…, read:…`. Throws a message
 * that names the bad entry by position (never the token itself).
 */
export function parseScopedTokens(value: string | undefined): ScopedToken[] {
  if (!value || value.trim() === '') return [];
  return value.split(',').map((entry, i) => {
    const match = /^\s*(\w+):(\S+)\s*$/.exec(entry);
    if (!match || !(TOKEN_SCOPES as readonly string[]).includes(match[1]!)) {
      throw new Error(`API_TOKENS entry ${i + 1}: write scope:token with a scope of ${TOKEN_SCOPES.join(', ')}`);
    }
    if (match[2]!.length < 16) throw new Error(`API_TOKENS entry ${i + 1}: the token is shorter than 16 characters`);
    return { scope: match[1] as TokenScope, token: match[2]! };
  });
}
