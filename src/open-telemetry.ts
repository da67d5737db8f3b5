// The OpenTelemetry API pgdrain traces with (src/tracing.ts), when the app uses one. Its type here
// asks only for what any copy of `@opentelemetry/api` 1.x has, and names none of its types: the
// package's published types must not need an optional dependency (a strict tsc without
// skipLibCheck would fail on an import of it in a .d.ts).

/** `import * as api from '@opentelemetry/api'`: what pgdrain needs to know it is one. */
export interface OpenTelemetryApi {
  readonly trace: object;
  readonly context: object;
  readonly SpanKind: object;
}

/** Where @opentelemetry/api 1.x keeps what was registered with it (its tracer provider, context
 * manager …), shared by every copy of the API in the process. */
const REGISTERED = Symbol.for('opentelemetry.js.api.1');

let given: OpenTelemetryApi | null | undefined;
let loading: Promise<OpenTelemetryApi | null> | undefined;

/** Use this OpenTelemetry API (null: none, whatever is registered). Needed in a Worker; elsewhere
 * the API is found by itself once the app registers a tracer provider. */
export function useOpenTelemetry(api: OpenTelemetryApi | null): void {
  given = api;
}

/** The OpenTelemetry API when the app uses it, else null (nothing loaded). */
export function openTelemetry(): Promise<OpenTelemetryApi | null> | OpenTelemetryApi | null {
  if (given !== undefined) return given;
  if (!(globalThis as Record<symbol, unknown>)[REGISTERED]) return null;
  // A variable, so that bundlers leave the optional peer alone.
  const specifier = '@opentelemetry/api';
  loading ??= (import(/* @vite-ignore */ specifier) as Promise<OpenTelemetryApi>).then(
    (api) => api,
    () => null,
  );
  return loading;
}
