// The few parts of @cloudflare/vitest-plugin's `cloudflare:test` module these tests use.
declare module 'cloudflare:test' {
  export const env: {
    DATABASE_URL: string;
    CONFORMANCE_DATABASE_URL: string;
    SCHEDULED_DATABASE_URL: string;
    HOSTILE_DATABASE_URL: string;
    CLIENT_DATABASE_URL: string;
    TRACING_DATABASE_URL: string;
    CLOCK_DATABASE_URL: string;
    /** The queue's clock under test (test/workers/main.ts). */
    TEST_CLOCK: { idFromName(name: string): unknown; get(id: unknown): unknown };
    SCHEDULE_CLOCK_DATABASE_URL: string;
    TEST_SCHEDULE_CLOCK: { idFromName(name: string): unknown; get(id: unknown): unknown };
    /** Local Hyperdrive bindings in front of the test PostgreSQL (one database each). */
    HYPERDRIVE_CONFORMANCE: { connectionString: string };
    HYPERDRIVE_SCHEDULED: { connectionString: string };
    HYPERDRIVE_TRACING: { connectionString: string };
    NEON_WS_PROXY: string;
    API_TOKEN: string;
    API_TOKENS: string;
    WEBHOOK_ALLOWED_HOSTS: string;
  };
  export const SELF: { fetch(input: string | Request, init?: RequestInit): Promise<Response> };
  export function createExecutionContext(): { waitUntil(p: Promise<unknown>): void; passThroughOnException(): void };
  export function waitOnExecutionContext(ctx: unknown): Promise<void>;
  export function runDurableObjectAlarm(stub: unknown): Promise<boolean>;
  export function runInDurableObject<R>(
    stub: unknown,
    callback: (instance: any, state: any) => R | Promise<R>,
  ): Promise<R>;
  export function createScheduledController(options?: { scheduledTime?: Date | number; cron?: string }): {
    cron: string;
    scheduledTime: number;
    noRetry(): void;
  };
}
