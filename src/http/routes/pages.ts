// What a person opens in a browser, none of which holds data or needs a token: the dashboard's
// page and assets (the data comes from the API with the token typed into the page), the API's
// OpenAPI description and its rendered reference at /docs.
import type { Hono } from 'hono';
import { NONCE, secureHeaders } from 'hono/secure-headers';
import { Scalar } from '@scalar/hono-api-reference';
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

/** The API reference at /docs: Scalar's page, its script pinned on jsDelivr, its config in a nonced inline script. */
const SCALAR_CDN = 'https://cdn.jsdelivr.net/npm/@scalar/api-reference@1.76.0';
const docsHeaders = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: [NONCE, 'https://cdn.jsdelivr.net'],
    // Scalar injects its styles at run time.
    styleSrc: ["'self'", "'unsafe-inline'", 'https://cdn.jsdelivr.net'],
    fontSrc: ["'self'", 'data:', 'https://cdn.jsdelivr.net', 'https://fonts.scalar.com'],
    imgSrc: ["'self'", 'data:'],
    // The document, and "try it" requests to this same API.
    connectSrc: ["'self'"],
    baseUri: ["'none'"],
    formAction: ["'none'"],
    frameAncestors: ["'none'"],
  },
  referrerPolicy: 'no-referrer',
});

export function pageRoutes(app: Hono<AppEnv>): void {
  app.get('/openapi.json', describe.openapi, access('open'), async (c) => c.json(await openApiDocument(app, c.var.basePath)));
  app.get('/docs', describe.docs, access('open'), docsHeaders, (c, next) =>
    Scalar({
      url: `${c.var.basePath}/openapi.json`,
      pageTitle: 'pgdrain API',
      cdn: SCALAR_CDN,
      nonce: c.get('secureHeadersNonce'),
      // Offline-friendly: no Scalar proxy, no hosted fonts beyond the stylesheet's.
      withDefaultFonts: false,
    })(c as never, next),
  );

  app.on('GET', ['/', '/dashboard'], describe.dashboardPage, access('open'), dashboardHeaders, (c) =>
    c.html(
      dashboardPage({
        oldestReadyWarnSeconds: c.var.api.oldestReadyWarnSeconds ?? 60,
        countsRecorded: (c.var.api.recordCounts ?? c.var.api.countsRecorded) !== false,
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
