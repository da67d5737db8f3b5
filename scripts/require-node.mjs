// Run before npm start/test/bench: pgdrain runs its TypeScript directly on Node >= 22.18, the
// first 22.x where type stripping is on by default (and wrangler needs a current Node too); say so
// plainly instead of failing with ERR_UNKNOWN_FILE_EXTENSION on a ".ts" file.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 18)) {
  console.error(
    `pgdrain needs Node.js >= 22.18 (it runs TypeScript without a build step); this is ${process.version}. ` +
      'Install a current Node (or run `source .ci/node-env.sh`, which fetches Node 24 from npm) and try again.',
  );
  process.exit(1);
}
