// How the operator commands print: tables that fit an 80-column terminal (the widest column gives
// way, cut with an ellipsis), `key  value` lines for one record, dates in UTC without the noise.
// Everything a database returns is printed as text: control characters are shown escaped, so a
// payload or an error message cannot move the cursor or clear the screen.

export const TERMINAL_WIDTH = 80;

/** A value as one line of plain text. */
export function cell(value: unknown): string {
  if (value === null || value === undefined) return '–';
  if (value instanceof Date) return formatDate(value);
  const text =
    typeof value === 'string'
      ? value
      : typeof value === 'number' || typeof value === 'boolean'
        ? String(value)
        : JSON.stringify(value);
  // eslint-disable-next-line no-control-regex
  // biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters it takes out
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) =>
    c === '\n' ? '⏎' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** `2026-12-01 04:03:23` (UTC). */
export function formatDate(date: Date): string {
  return date.toISOString().slice(0, 19).replace('T', ' ');
}

/** Seconds as `42 s`, `3 min 2 s`, `5 h 10 min`, `2 d 3 h`. */
export function formatAge(seconds: number | null): string {
  if (seconds === null) return '–';
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export interface Column<Row> {
  title: string;
  value: (row: Row) => unknown;
  /** Right-aligned (numbers). */
  right?: boolean;
  /** This column shrinks when the table is too wide (one per table). */
  flexible?: boolean;
}

/** Rows as a table of at most `width` characters: headers, two spaces between columns. */
export function table<Row>(rows: readonly Row[], columns: readonly Column<Row>[], width = TERMINAL_WIDTH): string {
  const texts = rows.map((row) => columns.map((c) => cell(c.value(row))));
  const widths = columns.map((c, i) => Math.max(c.title.length, ...texts.map((t) => t[i]!.length)));
  const total = () => widths.reduce((a, b) => a + b, 0) + 2 * (columns.length - 1);
  const flexible = columns.findIndex((c) => c.flexible);
  if (flexible >= 0 && total() > width)
    widths[flexible] = Math.max(columns[flexible]!.title.length, widths[flexible]! - (total() - width));
  const line = (cells: readonly string[]) =>
    cells
      .map((text, i) => {
        const fitted = text.length > widths[i]! ? `${text.slice(0, widths[i]! - 1)}…` : text;
        return columns[i]!.right ? fitted.padStart(widths[i]!) : fitted.padEnd(widths[i]!);
      })
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.title.toUpperCase())), ...texts.map(line)].join('\n');
}

/** One record as aligned `key  value` lines. */
export function record(entries: readonly [string, unknown][]): string {
  const width = Math.max(...entries.map(([key]) => key.length));
  return entries.map(([key, value]) => `${key.padEnd(width)}  ${cell(value)}`).join('\n');
}
