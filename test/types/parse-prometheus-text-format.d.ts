// The one function of parse-prometheus-text-format (it ships no types); output as prom2json's.
declare module 'parse-prometheus-text-format' {
  export interface MetricFamily {
    name: string;
    help: string;
    type: 'GAUGE' | 'COUNTER' | 'UNTYPED' | 'HISTOGRAM' | 'SUMMARY';
    metrics: { value: string; labels?: Record<string, string> }[];
  }
  export default function parsePrometheusTextFormat(text: string): MetricFamily[];
}
