// The sidecar's wake-up line: one dedicated connection that LISTENs on the queue's channels.
//
//   connecting ──LISTEN ok──► up ──error / end / failed health query──► down ──backoff──► connecting
//
// A half-open connection (the server vanished without a FIN) is caught by TCP keepalive and by a
// cheap query every `healthIntervalMs` with its own timeout. Notifications sent while the line is
// down are lost; the sidecar's poll covers that gap, and `onUp` triggers a drain at every
// (re)connect for the same reason.
import pg from 'pg';

export interface ListenerOptions {
  connectionString: string;
  channels: readonly string[];
  onNotify: (channel: string, payload: string) => void;
  onUp: () => void;
  onDown: (error: unknown) => void;
  /** Default 15 s. */
  healthIntervalMs?: number;
  /** Reconnect delays grow from 100 ms to this. Default 10 s. */
  maxBackoffMs?: number;
}

export class NotificationListener {
  readonly #options: ListenerOptions;
  #client: pg.Client | null = null;
  #stopped = false;
  #up = false;
  #failures = 0;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  #healthTimer: ReturnType<typeof setInterval> | undefined;

  constructor(options: ListenerOptions) {
    this.#options = options;
  }

  get isUp(): boolean {
    return this.#up;
  }

  start(): void {
    void this.#connect();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    clearInterval(this.#healthTimer);
    const client = this.#client;
    this.#client = null;
    this.#up = false;
    await client?.end().catch(() => {});
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    const client = new pg.Client({
      connectionString: this.#options.connectionString,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      connectionTimeoutMillis: 10_000,
      application_name: 'pgdrain-listener',
    });
    this.#client = client;
    let failed = false;
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      void this.#lost(client, error);
    };
    client.on('error', fail);
    client.on('end', () => fail(new Error('the LISTEN connection closed')));
    client.on('notification', (message) => {
      if (this.#options.channels.includes(message.channel))
        this.#options.onNotify(message.channel, message.payload ?? '');
    });
    try {
      await client.connect();
      for (const channel of this.#options.channels) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (error) {
      fail(error);
      return;
    }
    if (this.#stopped || failed) return;
    this.#up = true;
    this.#failures = 0;
    this.#healthTimer = setInterval(
      () => void this.#checkHealth(client, fail),
      this.#options.healthIntervalMs ?? 15_000,
    );
    this.#healthTimer.unref?.();
    this.#options.onUp();
  }

  async #checkHealth(client: pg.Client, fail: (error: unknown) => void): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        client.query('SELECT 1'),
        new Promise((_, reject) => {
          timer = setTimeout(
            () => reject(new Error('the LISTEN connection did not answer a health query within 5 s')),
            5_000,
          );
        }),
      ]);
    } catch (error) {
      fail(error);
    } finally {
      clearTimeout(timer);
    }
  }

  async #lost(client: pg.Client, error: unknown): Promise<void> {
    clearInterval(this.#healthTimer);
    if (this.#client === client) this.#client = null;
    const wasUp = this.#up;
    this.#up = false;
    // Tear the socket down for good: a half-open connection would otherwise linger.
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    client.end().catch(() => {});
    if (this.#stopped) return;
    if (wasUp || this.#failures === 0) this.#options.onDown(error);
    const delay = Math.min(this.#options.maxBackoffMs ?? 10_000, 100 * 2 ** this.#failures) * (0.5 + Math.random() / 2);
    this.#failures++;
    this.#retryTimer = setTimeout(() => void this.#connect(), delay);
    this.#retryTimer.unref?.();
  }
}
