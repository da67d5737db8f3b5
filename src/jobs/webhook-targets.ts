// Where the webhook kind may deliver, decided twice:
//   at enqueue and again at delivery, the URL against the allow-list (WEBHOOK_ALLOWED_HOSTS): http
//   or https, no credentials, a host the list names, and port 80 or 443 unless the entry names its
//   port;
//   at delivery, the addresses its host resolves to: a public address, or one the list names
//   itself (an address or a CIDR range). Loopback, private, shared, link-local, unique-local,
//   multicast, reserved and unspecified addresses are refused otherwise, so a name in the list
//   cannot point the queue at 127.0.0.1 or a cloud's metadata address.
// The address checked is the one dialled (webhook-delivery.ts): no second lookup can swap it.
//
// Entries: `hooks.example.com`, `*.example.com` (any subdomain), `hooks.example.com:8443`,
// `203.0.113.7`, `10.0.0.0/8`, `127.0.0.1:9000`, `[::1]:9000`, `fd00::/8`.

/** An address as 16 bytes (IPv4 as ::ffff:a.b.c.d) and its family. */
export interface IpAddress {
  family: 4 | 6;
  bytes: Uint8Array;
}

interface Range {
  /** 16 bytes, IPv4 mapped. */
  bytes: Uint8Array;
  /** Prefix length over the 128 bits. */
  prefix: number;
}

type Entry =
  | { type: 'name'; name: string; wildcard: boolean; port: number | null; text: string }
  | { type: 'address'; range: Range; port: number | null; text: string };

export class AllowList {
  readonly entries: readonly Entry[];

  constructor(entries: readonly string[]) {
    this.entries = entries.map(parseEntry);
  }

  get isEmpty(): boolean {
    return this.entries.length === 0;
  }

  /** An entry admits the host (a name or an address literal) at `port`. */
  admits(host: string, port: number): boolean {
    const address = parseIp(host);
    return this.entries.some(
      (entry) =>
        portAdmitted(entry.port, port) &&
        (address ? entry.type === 'address' && inRange(address, entry.range) : nameMatches(entry, host)),
    );
  }

  /** Some entry names the host, whatever the port. */
  namesHost(host: string): boolean {
    const address = parseIp(host);
    return this.entries.some((entry) =>
      address ? entry.type === 'address' && inRange(address, entry.range) : nameMatches(entry, host),
    );
  }

  /** The address may be dialled: public, or named by an address entry (the port is the entry's
   * that admitted the URL: the address entry of a literal, the name entry of a name). */
  allowsAddress(address: IpAddress): boolean {
    return (
      !isSpecialAddress(address) ||
      this.entries.some((entry) => entry.type === 'address' && inRange(address, entry.range))
    );
  }
}

/** A URL the webhook kind may deliver to, as checked against the allow-list. */
export interface CheckedTarget {
  url: URL;
  /** The host name, or the address literal without brackets. */
  host: string;
  port: number;
  /** Set when the host is an address literal (nothing to resolve). */
  literal: IpAddress | null;
}

const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443 };
const ALLOWED_LIST = 'WEBHOOK_ALLOWED_HOSTS';

/** The URL checked against the list: the target, or why it is not allowed. */
export function checkTarget(raw: string, list: AllowList): CheckedTarget | { problem: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { problem: 'url is not a valid URL' };
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return { problem: 'url must use http or https' };
  if (url.username || url.password) return { problem: 'url must not carry credentials; send them in headers' };
  const host = url.hostname
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '');
  const port = url.port === '' ? DEFAULT_PORTS[url.protocol]! : Number(url.port);
  if (list.isEmpty)
    return { problem: `no webhook host is allowed: set ${ALLOWED_LIST} (comma-separated, *.example.com patterns)` };
  if (!list.namesHost(host)) return { problem: `host ${host} is not allowed: not in ${ALLOWED_LIST}` };
  if (!list.admits(host, port)) {
    return {
      problem:
        `port ${port} of host ${host} is not allowed: ${ALLOWED_LIST} allows ports 80 and 443 unless an ` +
        `entry names its port (${host}:${port})`,
    };
  }
  const literal = parseIp(host);
  if (literal && !list.allowsAddress(literal))
    return { problem: `address ${host} is not allowed: ${ALLOWED_LIST} does not name it` };
  return { url, host, port, literal };
}

/** Why a delivery to `host` may not go to the addresses it resolved to. */
export function refusedAddressProblem(host: string): string {
  return (
    `host ${host} resolved to an address that is not allowed (loopback, private, link-local, unique-local, ` +
    `multicast, reserved and unspecified addresses are refused unless ${ALLOWED_LIST} names them)`
  );
}

/** Checks each entry of a list; throws naming the first that is not an entry. */
export function checkAllowList(entries: readonly string[]): void {
  for (const entry of entries) parseEntry(entry);
}

function portAdmitted(entryPort: number | null, port: number): boolean {
  return entryPort === null ? port === 80 || port === 443 : port === entryPort;
}

function nameMatches(entry: Entry, host: string): boolean {
  if (entry.type !== 'name') return false;
  return entry.wildcard ? host.endsWith(`.${entry.name}`) : host === entry.name;
}

const NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

function parseEntry(raw: string): Entry {
  const text = raw.trim().toLowerCase();
  const refuse = (why: string): never => {
    throw new Error(`${ALLOWED_LIST}: entry ${JSON.stringify(raw.trim())} ${why}`);
  };
  const port = (digits: string | undefined): number | null => {
    if (digits === undefined) return null;
    const n = Number(digits);
    if (!/^\d{1,5}$/.test(digits) || n < 1 || n > 65535) refuse('has a port outside 1-65535');
    return n;
  };
  // [v6]:port, [v6]
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (bracketed) {
    const address = parseIpv6(bracketed[1]!);
    if (!address) refuse('is not an IPv6 address');
    return { type: 'address', range: { bytes: address!.bytes, prefix: 128 }, port: port(bracketed[2]), text };
  }
  // address/prefix (either family; no port)
  const cidr = /^([^/]+)\/(\d{1,3})$/.exec(text);
  if (cidr) {
    const address = parseIp(cidr[1]!);
    if (!address) refuse('is not an address range (a.b.c.d/n or v6::/n)');
    const bits = Number(cidr[2]);
    const max = address!.family === 4 ? 32 : 128;
    if (bits > max) refuse(`has a prefix longer than ${max}`);
    return {
      type: 'address',
      range: { bytes: address!.bytes, prefix: address!.family === 4 ? 96 + bits : bits },
      port: null,
      text,
    };
  }
  // a bare IPv6 address (no port: it would be ambiguous)
  if ((text.match(/:/g) ?? []).length > 1) {
    const address = parseIpv6(text);
    if (!address) refuse('is not an IPv6 address (write [v6]:port for a port)');
    return { type: 'address', range: { bytes: address!.bytes, prefix: 128 }, port: null, text };
  }
  const [host = '', portText] = text.split(':') as [string, string | undefined];
  const v4 = parseIpv4(host);
  if (v4) return { type: 'address', range: { bytes: v4.bytes, prefix: 128 }, port: port(portText), text };
  const wildcard = host.startsWith('*.');
  const name = wildcard ? host.slice(2) : host;
  if (!NAME.test(name)) refuse('is not a host name, *.domain pattern, address or range');
  return { type: 'name', name, wildcard, port: port(portText), text };
}

/** An IPv4 or IPv6 address literal (no brackets), or null. */
export function parseIp(text: string): IpAddress | null {
  return parseIpv4(text) ?? (text.includes(':') ? parseIpv6(text) : null);
}

function parseIpv4(text: string): IpAddress | null {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)) return null;
  const bytes = new Uint8Array(16);
  bytes[10] = 0xff;
  bytes[11] = 0xff;
  for (const [i, p] of parts.entries()) bytes[12 + i] = Number(p);
  return { family: 4, bytes };
}

function parseIpv6(text: string): IpAddress | null {
  if (!/^[0-9a-f:.]+$/i.test(text)) return null; // a zone (%eth0) or anything else: not an address we dial
  let head = text;
  let tail: number[] = [];
  // An IPv4 tail (::ffff:1.2.3.4) is two groups.
  const v4 = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const parsed = parseIpv4(v4[2]!);
    if (!parsed) return null;
    const b = parsed.bytes;
    tail = [(b[12]! << 8) | b[13]!, (b[14]! << 8) | b[15]!];
    head = v4[1]!.endsWith('::') ? v4[1]! : v4[1]!.slice(0, -1);
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  if (![...left, ...right].every((g) => /^[0-9a-f]{1,4}$/i.test(g))) return null;
  const given = left.length + right.length + tail.length;
  if (halves.length === 1 ? given !== 8 : given > 7) return null;
  const words = [
    ...left.map((g) => parseInt(g, 16)),
    ...Array(8 - given).fill(0),
    ...right.map((g) => parseInt(g, 16)),
    ...tail,
  ];
  const bytes = new Uint8Array(16);
  words.forEach((w, i) => {
    bytes[i * 2] = w >> 8;
    bytes[i * 2 + 1] = w & 0xff;
  });
  const mapped = bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  return { family: mapped ? 4 : 6, bytes };
}

function inRange(address: IpAddress, range: Range): boolean {
  const full = Math.floor(range.prefix / 8);
  for (let i = 0; i < full; i++) if (address.bytes[i] !== range.bytes[i]) return false;
  const rest = range.prefix % 8;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return (address.bytes[full]! & mask) === (range.bytes[full]! & mask);
}

const range = (text: string): Range => {
  const entry = parseEntry(text);
  if (entry.type !== 'address') throw new Error(`not a range: ${text}`);
  return entry.range;
};

/** Addresses a public delivery never needs (RFC 6890 and its successors): refused unless named. */
const SPECIAL_RANGES: readonly Range[] = [
  // IPv4 (mapped)
  '0.0.0.0/8', // "this network", unspecified
  '10.0.0.0/8', // private
  '100.64.0.0/10', // shared address space (carrier-grade NAT)
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local (cloud metadata services)
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // documentation
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // documentation
  '203.0.113.0/24', // documentation
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
  // IPv6
  '::/96', // unspecified, loopback, IPv4-compatible (deprecated)
  '64:ff9b::/96', // NAT64: reaches IPv4 addresses through a translator
  '64:ff9b:1::/48', // local-use NAT64
  '100::/64', // discard
  '2001::/23', // IETF protocol assignments (Teredo among them)
  '2001:db8::/32', // documentation
  '2002::/16', // 6to4: reaches IPv4 addresses
  'fc00::/7', // unique-local
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
].map(range);

/** Loopback, private, link-local, multicast, … : an address a public webhook never is. */
export function isSpecialAddress(address: IpAddress): boolean {
  return SPECIAL_RANGES.some((r) => inRange(address, r));
}
