// Whether a pooler stands between the sidecar and PostgreSQL, and which kind: what it changes is
// decided once, at the start, from DATABASE_POOLER or, by default (`auto`), from what the URL and
// the server say.
//
//   none         a direct connection: every session feature pgdrain uses works.
//   session      a pooler that gives each client one server session while it is connected
//                (PgBouncer's session mode): the same, but it may refuse startup parameters.
//   transaction  a server session per transaction (PgBouncer's default on most hosts, Supavisor,
//                Neon's `-pooler` host): no prepared statement outlives a statement, LISTEN hears
//                nothing, a session setting lands on someone else's session.
//
// `auto` reads the URL first (`pgbouncer=true`, Prisma's convention; a Neon `-pooler` host;
// Supabase's transaction port 6543), then asks: a startup parameter refused is a pooler; two
// clients that share one server session (pg_backend_pid) are behind a transaction pooler. A pooler
// that hides both is met by the parts that need a session anyway: the listener hears its own test
// NOTIFY or polls, and a named statement a pooled session lost is sent again unnamed (queries/db.ts).
import pg from 'pg';

export type PoolerMode = 'none' | 'session' | 'transaction';
export type PoolerSetting = 'auto' | PoolerMode;

export interface Pooler {
  mode: PoolerMode;
  /** How it was known, for the start's log line. */
  how: string;
  /** Whether connections may carry startup options (`-c synchronous_commit=off`). */
  startupOptions: boolean;
}

/** The drain pool's startup parameter (sidecar/database.ts), asked for first: a pooler that refuses
 * it says so at connect. */
export const DRAIN_STARTUP_OPTIONS = '-c synchronous_commit=off';

/** What the URL itself says about a transaction pooler, by the conventions of those who host them. */
function poolerFromUrl(url: string): PoolerMode | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.searchParams.get('pgbouncer') === 'true') return 'transaction';
  if (/-pooler\./.test(parsed.hostname)) return 'transaction';
  if (parsed.port === '6543') return 'transaction';
  return undefined;
}

export async function detectPooler(url: string, setting: PoolerSetting = 'auto'): Promise<Pooler> {
  if (setting !== 'auto')
    return { mode: setting, how: 'DATABASE_POOLER', startupOptions: setting === 'none' || (await takesOptions(url)) };
  const fromUrl = poolerFromUrl(url);
  if (fromUrl) return { mode: fromUrl, how: 'the URL', startupOptions: false };
  const startupOptions = await takesOptions(url);
  if (await sharesSessions(url))
    return { mode: 'transaction', how: 'two clients shared one server session', startupOptions: false };
  return startupOptions
    ? { mode: 'none', how: 'the server took a startup parameter and kept each session', startupOptions }
    : { mode: 'session', how: 'a startup parameter was refused; each session was kept', startupOptions };
}

/** True when the server (or what stands in front of it) takes the drain pool's startup options. */
async function takesOptions(url: string): Promise<boolean> {
  const client = new pg.Client({
    connectionString: url,
    options: DRAIN_STARTUP_OPTIONS,
    application_name: 'pgdrain-probe',
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return true;
  } catch (error) {
    if (refusedStartupParameter(error)) return false;
    throw error;
  } finally {
    await client.end().catch(() => {});
  }
}

/** PgBouncer's `unsupported startup parameter: options` (08P01), Supavisor's alike. */
function refusedStartupParameter(error: unknown): boolean {
  const e = error as { code?: string; message?: string } | null;
  return /unsupported startup parameter/i.test(e?.message ?? '') && (e?.code === undefined || e.code === '08P01');
}

/** Two clients: the first asks its server session's pid, the second opens a transaction, the first
 * asks again. Behind a transaction pooler the second is given the first's idle session (or the
 * first a new one); a direct connection or a session pooler keeps each client on its own. */
async function sharesSessions(url: string): Promise<boolean> {
  const open = async () => {
    const client = new pg.Client({ connectionString: url, application_name: 'pgdrain-probe' });
    client.on('error', () => {});
    await client.connect();
    return client;
  };
  const pid = async (client: pg.Client) =>
    Number((await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
  const first = await open();
  let second: pg.Client | undefined;
  try {
    const before = await pid(first);
    second = await open();
    await second.query('BEGIN');
    const theirs = await pid(second);
    if (theirs === before) return true;
    // A pooler with one server session for us both makes the first wait for the second's COMMIT: a
    // direct connection answers at once.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const after = await Promise.race([
      pid(first),
      new Promise<'waited'>((resolve) => (timer = setTimeout(() => resolve('waited'), 2_000))),
    ]);
    clearTimeout(timer);
    await second.query('COMMIT');
    return after === 'waited' || after !== before;
  } finally {
    await Promise.all([first.end().catch(() => {}), second?.end().catch(() => {})]);
  }
}
