// What a person opens in a browser, none of which holds data or needs a token: the dashboard's
// page and assets (the data comes from the API with the token typed into the page), the API's
// OpenAPI description and its rendered reference at /docs.
import type { Hono } from 'hono';
import { NONCE, secureHeaders } from 'hono/secure-headers';
import { defaultFor } from '../../settings.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { dashboardPage } from '../dashboard/page.ts';
// Generated from ../dashboard/browser/dashboard.ts by scripts/build-dashboard.mjs (npm start/test/build, wrangler).
import { DASHBOARD_SCRIPT } from '../dashboard/script.generated.ts';
import { DASHBOARD_CSS } from '../dashboard/style.ts';
import { describe, openApiDocument } from '../openapi.ts';

export const DASHBOARD_REFRESH_SECONDS = 5;

// The dashboard's page loads only its own script and stylesheet and talks only to this origin; its
// login form can never be submitted as a navigation (the token would end up in a URL).
const dashboardHeaders = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: ["'self'"],
    styleSrc: ["'self'"],
    connectSrc: ["'self'"],
    imgSrc: ["'self'", 'data:'],
    baseUri: ["'none'"],
    formAction: ["'none'"],
    frameAncestors: ["'none'"],
  },
  referrerPolicy: 'no-referrer',
});

/**
 * The API reference at /docs: Scalar's single-file bundle from jsDelivr, pinned to one file of one
 * version with Subresource Integrity (the browser refuses any other bytes) and allowed by that URL
 * alone in the page's policy; its config in a nonced inline script. The hash is the published npm
 * file's (jsDelivr serves those verbatim): `npm pack @scalar/api-reference@<version>` and
 * `openssl dgst -sha384 -binary package/dist/browser/standalone.js | base64` to move to another.
 */
export const SCALAR_SCRIPT = {
  url: 'https://cdn.jsdelivr.net/npm/@scalar/api-reference@1.76.0/dist/browser/standalone.js',
  integrity: 'sha384-oH1C0RwqcwbVXkC+r8A+4qRoyEUQdtxAzOwumkxZtQBBcsy61FOoPt7B50OVJYYQ',
} as const;
const docsHeaders = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: [NONCE, SCALAR_SCRIPT.url],
    // Scalar injects its styles at run time.
    styleSrc: ["'self'", "'unsafe-inline'"],
    fontSrc: ["'self'", 'data:'],
    imgSrc: ["'self'", 'data:'],
    // The document, and "try it" requests to this same API.
    connectSrc: ["'self'"],
    baseUri: ["'none'"],
    formAction: ["'none'"],
    frameAncestors: ["'none'"],
  },
  referrerPolicy: 'no-referrer',
});

/** The /docs page: Scalar rendering the OpenAPI document at `documentUrl`. */
function docsPage(documentUrl: string, nonce: string): string {
  // JSON inside a script element: `<` escaped so that no string in it can end the element.
  const config = JSON.stringify({ url: documentUrl, withDefaultFonts: false }).replace(/</g, '\\u003c');
  const scalar =
    `<script src="${SCALAR_SCRIPT.url}" integrity="${SCALAR_SCRIPT.integrity}" crossorigin="anonymous" ` +
    `nonce="${nonce}"></script>`;
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>pgdrain API</title>
  </head>
  <body>
    <div id="app"></div>
    ${scalar}
    <script nonce="${nonce}">Scalar.createApiReference('#app', ${config})</script>
  </body>
</html>
`;
}

export function pageRoutes(app: Hono<AppEnv>): void {
  app.get('/openapi.json', describe.openapi, access('open'), async (c) =>
    c.json(await openApiDocument(app, c.var.basePath)),
  );
  app.get('/docs', describe.docs, access('open'), docsHeaders, (c) =>
    c.html(docsPage(`${c.var.basePath}/openapi.json`, c.get('secureHeadersNonce') ?? '')),
  );

  app.on('GET', ['/', '/dashboard'], describe.dashboardPage, access('open'), dashboardHeaders, (c) =>
    c.html(
      dashboardPage({
        oldestReadyWarnSeconds: c.var.api.oldestReadyWarnSeconds ?? defaultFor('oldestReadyWarnSeconds', 'sidecar'),
        countsRecorded: c.var.api.recordCounts !== false,
        refreshSeconds: DASHBOARD_REFRESH_SECONDS,
        basePath: c.var.basePath,
      }),
      200,
      { 'Cache-Control': 'no-store' },
    ),
  );
  app.get('/dashboard/script.js', describe.dashboardScript, access('open'), dashboardHeaders, (c) =>
    c.body(DASHBOARD_SCRIPT, 200, { 'Content-Type': 'text/javascript; charset=utf-8', 'Cache-Control': 'no-cache' }),
  );
  app.get('/dashboard/style.css', describe.dashboardStyle, access('open'), dashboardHeaders, (c) =>
    c.body(DASHBOARD_CSS, 200, { 'Content-Type': 'text/css; charset=utf-8', 'Cache-Control': 'no-cache' }),
  );
}
