// /openapi.json: a valid OpenAPI 3.1 document generated from the contract's zod schemas, listing
// exactly the routes the app serves (a new route without a description fails here), with the
// server it is mounted under; /docs renders it under a CSP of its own.
import { Validator } from '@seriousme/openapi-schema-validator';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/http/app.ts';
import { SCALAR_SCRIPT } from '../../src/http/routes/pages.ts';
import { createDefaultRegistry } from '../../src/jobs/index.ts';

const app = createApp({
  withDb: async () => {
    throw new Error('the document needs no database');
  },
  registry: createDefaultRegistry({}),
  apiToken: 'openapi-test-token-0123456789',
});

type Operation = {
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
  security?: unknown[];
  parameters?: { name: string; in: string }[];
};
type Document = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  servers: { url: string }[];
  components: { schemas: Record<string, unknown> };
};

async function documentOf(
  target: { request: (path: string) => Response | Promise<Response> },
  path = '/openapi.json',
): Promise<Document> {
  const res = await target.request(path);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/application\/json/);
  return (await res.json()) as Document;
}

describe('GET /openapi.json', () => {
  it('is served without a token and validates against the OpenAPI 3.1 schema', async () => {
    const doc = await documentOf(app);
    expect(doc.openapi).toBe('3.1.0');
    const validator = new Validator();
    const result = await validator.validate(doc as never);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('describes exactly the routes the app serves', async () => {
    const doc = await documentOf(app);
    const served = new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`));
    const described = new Set(
      Object.entries(doc.paths).flatMap(([path, operations]) =>
        Object.keys(operations).map((method) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ':$1')}`),
      ),
    );
    expect([...served].filter((r) => !described.has(r)).sort(), 'served but not described').toEqual([]);
    expect([...described].filter((r) => !served.has(r)).sort(), 'described but not served').toEqual([]);
  });

  it('gives every operation its responses, errors in the shared shape, and the token except on the open routes', async () => {
    const doc = await documentOf(app);
    const open = [
      '/healthz',
      '/openapi.json',
      '/docs',
      '/',
      '/dashboard',
      '/dashboard/script.js',
      '/dashboard/style.css',
    ];
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        const where = `${method.toUpperCase()} ${path}`;
        expect(Object.keys(op.responses).length, where).toBeGreaterThan(0);
        if (open.includes(path)) expect(op.security, where).toEqual([]);
        else {
          expect(op.security, where).toBeUndefined(); // the document's default: the bearer token
          expect(Object.keys(op.responses), where).toEqual(expect.arrayContaining(['401', '403', '503', '507']));
        }
        for (const [status, response] of Object.entries(op.responses)) {
          // /healthz answers 503 in its own shape ({ ok: false, error }); every other error is an Error.
          if (Number(status) >= 400 && path !== '/healthz')
            expect(response.content?.['application/json']?.schema, `${where} ${status}`).toEqual({
              $ref: '#/components/schemas/Error',
            });
        }
        for (const name of path.match(/\{(\w+)\}/g) ?? []) {
          expect(
            op.parameters?.some((p) => p.in === 'path' && `{${p.name}}` === name),
            `${where} ${name}`,
          ).toBe(true);
        }
      }
    }
    expect(doc.paths['/jobs']!.get!.parameters!.map((p) => `${p.in} ${p.name}`)).toEqual([
      'query status',
      'query kind',
      'query dedupeKey',
      'query groupKey',
      'query payload',
      'query limit',
      'query cursor',
    ]);
    expect(Object.keys(doc.paths['/jobs']!.post!.responses).sort()).toEqual([
      '200',
      '201',
      '400',
      '401',
      '403',
      '413',
      '415',
      '422',
      '503',
      '507',
    ]);
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(['Job', 'JobInput', 'Enqueued', 'Error', 'QueueStats']),
    );
  });

  it('under a prefix, names it as the server, so every path resolves where the app is mounted', async () => {
    const outer = new Hono();
    outer.route('/queue', app);
    const doc = await documentOf(outer, '/queue/openapi.json');
    expect(doc.servers).toEqual([{ url: '/queue' }]);
    expect((await documentOf(app)).servers).toEqual([{ url: '/' }]);
  });
});

describe('GET /docs', () => {
  it('renders the reference from this document, under its own CSP with a fresh nonce and a pinned script', async () => {
    const pages = await Promise.all([app.request('/docs'), app.request('/docs')]);
    const nonces: string[] = [];
    for (const res of pages) {
      expect(res.status).toBe(200);
      const csp = res.headers.get('content-security-policy') ?? '';
      const nonce = /'nonce-([^']+)'/.exec(csp)?.[1];
      expect(nonce).toBeTruthy();
      nonces.push(nonce!);
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("connect-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toContain("'unsafe-eval'");
      const html = await res.text();
      // Every script carries the nonce; the library comes from a pinned version.
      const scripts = html.match(/<script\b[^>]*>/g) ?? [];
      expect(scripts.length).toBeGreaterThan(0);
      for (const tag of scripts) expect(tag).toContain(`nonce="${nonce}"`);
      // The library: one file of one version, with its hash; the policy allows that file alone.
      expect(html).toContain(
        `<script src="${SCALAR_SCRIPT.url}" integrity="${SCALAR_SCRIPT.integrity}" crossorigin="anonymous" nonce="${nonce}"></script>`,
      );
      expect(SCALAR_SCRIPT.url).toMatch(
        /^https:\/\/cdn\.jsdelivr\.net\/npm\/@scalar\/api-reference@\d+\.\d+\.\d+\/dist\/browser\/standalone\.js$/,
      );
      expect(SCALAR_SCRIPT.integrity).toMatch(/^sha384-[A-Za-z0-9+/]{64}$/);
      expect(csp).toContain(`script-src 'nonce-${nonce}' ${SCALAR_SCRIPT.url}`);
      expect(csp).not.toMatch(/https:\/\/cdn\.jsdelivr\.net[ ;]/);
      expect(html).toContain('"url":"/openapi.json"');
    }
    expect(nonces[0]).not.toBe(nonces[1]);
    const outer = new Hono();
    outer.route('/queue', app);
    expect(await (await outer.request('/queue/docs')).text()).toContain('"url":"/queue/openapi.json"');
  });
});
