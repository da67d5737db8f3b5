// `pgdrain/hono`: the HTTP API and dashboard as a Hono app to serve on its own or mount inside
// yours (`myApp.route('/queue', createApp(...))`: the dashboard finds its assets and the API
// under that prefix). The shell that serves it says how to reach the database.
export {
  createApp,
  parseScopedTokens,
  DEFAULT_MAX_BODY_BYTES,
  TOKEN_SCOPES,
  type ApiRuntime,
  type ApiConfig,
  type WithDb,
  type ScopedToken,
  type TokenScope,
} from '../http/app.ts';
export { MAX_BATCH } from '../http/contract.ts';
