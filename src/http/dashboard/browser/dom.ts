// What every view of the dashboard builds with: the page's elements by id, new elements (text
// through textContent only, so nothing from the database is ever parsed as HTML), and how counts,
// ages and times are written.
const SVG_NS = 'http://www.w3.org/2000/svg';

/** The page's element with this id; the page and this script ship together, so a missing one is a bug. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the dashboard page has no #${id}`);
  return node as T;
}
export const table = (id: string) => byId<HTMLTableElement>(id);

export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {},
  children: Node[] = [],
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.appendChild(child);
  return node;
}

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string>,
  text?: string,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

export const formatCount = (n: number) => Number(n).toLocaleString('en-US');

export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function formatWhen(iso: string | null, none = '–'): string {
  if (!iso) return none;
  return new Date(iso).toLocaleString([], {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
}

/** A duration in ms as a person reads it: `850 ms`, `2.4 s`, `3 min 5 s`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return formatAge(ms / 1000);
}

export function countCell(column: string, value: number, extraClass?: string): HTMLTableCellElement {
  return element('td', {
    class: `num${extraClass ? ` ${extraClass}` : ''}`,
    'data-col': column,
    'data-value': String(value),
    text: formatCount(value),
  });
}

/** The body rows of the table with this id, replaced. */
export function fillTable(id: string, rows: HTMLTableRowElement[]): void {
  table(id).tBodies[0]!.replaceChildren(...rows);
}

/** JSON for a table cell: compact, cut to a few lines (the full text in its title). */
export function jsonCell(value: unknown): HTMLElement {
  const text = JSON.stringify(value);
  return element('code', { title: text, text: text.length > 240 ? `${text.slice(0, 240)}…` : text });
}

/** A link to a job's page (`#/jobs/7`). */
export const jobLink = (id: string, text = `#${id}`) =>
  element('a', { href: `#/jobs/${id}`, 'data-job-link': id, text });

/** A link to a kind's page (`#/kinds/email`). */
export const kindLink = (kind: string) =>
  element('a', { href: `#/kinds/${encodeURIComponent(kind)}`, 'data-kind-link': kind, text: kind });
