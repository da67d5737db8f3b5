// The real OpenTelemetry SDK for the tracing tests: a tracer provider with an in-memory exporter,
// registered globally with an AsyncLocalStorage context manager (Node, and workerd with
// nodejs_compat), and finished spans as plain objects to assert on (or to write to a file from
// another process).
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

export interface ExportedSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  links: { traceId: string; spanId: string }[];
  attributes: Record<string, unknown>;
  status: { code: number; message?: string };
  events: string[];
}

export function registerTracing() {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(contextManager);
  return {
    exporter,
    spans: (): ExportedSpan[] => exporter.getFinishedSpans().map(exported),
    unregister: async () => {
      await provider.shutdown();
      trace.disable();
      try {
        context.disable();
      } catch {
        // workerd's AsyncLocalStorage has no disable(): the manager stays, with nothing to trace to
      }
    },
  };
}

export function exported(span: ReadableSpan): ExportedSpan {
  const own = span.spanContext();
  return {
    name: span.name,
    kind: span.kind,
    traceId: own.traceId,
    spanId: own.spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    links: span.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId })),
    attributes: { ...span.attributes },
    status: { code: span.status.code, ...(span.status.message ? { message: span.status.message } : {}) },
    events: span.events.map((e) => e.name),
  };
}
