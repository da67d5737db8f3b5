// The throughput chart: completed and failed attempts per minute as stacked bars, in SVG built
// element by element (no chart library), drawn to the width of its box. The overview shows every
// kind's; a kind's page its own.
import type { Throughput } from '../../contract.ts';
import { byId, element, formatCount, svg } from './dom.ts';

/** Where a chart goes: its box, and the line of totals above it (ids prefixed for its numbers). */
export interface ChartPlace {
  chart: string;
  summary: string;
  prefix: string;
}

/** The last hour's totals above the chart. */
function renderThroughputSummary(place: ChartPlace, sum: { completed: number; failed: number; dead: number }): void {
  byId(place.summary).replaceChildren(
    element('strong', {
      id: `${place.prefix}-completed`,
      'data-value': String(sum.completed),
      text: formatCount(sum.completed),
    }),
    document.createTextNode(' completed, '),
    element('strong', {
      id: `${place.prefix}-failed`,
      'data-value': String(sum.failed),
      text: formatCount(sum.failed),
    }),
    document.createTextNode(' failed attempts, '),
    element('strong', { id: `${place.prefix}-dead`, 'data-value': String(sum.dead), text: formatCount(sum.dead) }),
    document.createTextNode(' became dead in the last hour.'),
  );
}

/** One minute's bar: completed at the bottom, failed attempts stacked on it. */
function minuteBar(
  m: Throughput['minutes'][number],
  x: number,
  barWidth: number,
  top: number,
  plotHeight: number,
  scale: number,
) {
  const completedHeight = (plotHeight * m.completed) / scale;
  const failedHeight = (plotHeight * m.failed) / scale;
  const group = svg('g', {});
  const at = new Date(m.minute).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  group.appendChild(svg('title', {}, `${at}: ${m.completed} completed, ${m.failed} failed`));
  if (m.completed > 0) {
    group.appendChild(
      svg('rect', {
        class: 'completed',
        x: String(x),
        width: String(barWidth),
        y: String(top + plotHeight - completedHeight),
        height: String(completedHeight),
      }),
    );
  }
  if (m.failed > 0) {
    group.appendChild(
      svg('rect', {
        class: 'failed',
        x: String(x),
        width: String(barWidth),
        y: String(top + plotHeight - completedHeight - failedHeight),
        height: String(failedHeight),
      }),
    );
  }
  return group;
}

export function renderThroughput(data: Throughput, place: ChartPlace): void {
  const minutes = data.minutes;
  const sum = { completed: 0, failed: 0, dead: 0 };
  let peak = 0;
  for (const m of minutes) {
    sum.completed += m.completed;
    sum.failed += m.failed;
    sum.dead += m.dead;
    peak = Math.max(peak, m.completed + m.failed);
  }
  renderThroughputSummary(place, sum);

  const chart = byId(place.chart);
  const width = Math.max(280, chart.clientWidth - 16);
  const height = 180;
  const [left, right, top, bottom] = [44, 6, 8, 22];
  const plotWidth = width - left - right;
  const plotHeight = height - top - bottom;
  const scale = niceCeiling(peak);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: String(width), height: String(height) });
  for (const f of [0, 0.5, 1]) {
    const y = top + plotHeight * (1 - f);
    root.appendChild(
      svg('line', { class: 'grid', x1: String(left), x2: String(width - right), y1: String(y), y2: String(y) }),
    );
    root.appendChild(
      svg(
        'text',
        { class: 'axis', x: String(left - 6), y: String(y + 4), 'text-anchor': 'end' },
        formatCount(Math.round(scale * f)),
      ),
    );
  }
  const slot = plotWidth / Math.max(1, minutes.length);
  const barWidth = Math.max(1, slot - (slot > 4 ? 2 : 0));
  for (const [i, m] of minutes.entries())
    root.appendChild(minuteBar(m, left + i * slot, barWidth, top, plotHeight, scale));
  const ticks: [number, string, string][] = [
    [0, 'start', `−${minutes.length} min`],
    [0.5, 'middle', `−${Math.round(minutes.length / 2)} min`],
    [1, 'end', 'now'],
  ];
  for (const [f, anchor, label] of ticks) {
    root.appendChild(
      svg(
        'text',
        { class: 'axis', x: String(left + plotWidth * f), y: String(height - 6), 'text-anchor': anchor },
        label,
      ),
    );
  }
  chart.replaceChildren(root);
}

function niceCeiling(value: number): number {
  if (value <= 4) return 4;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}
