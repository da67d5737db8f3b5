// Run before npm start/test/bench: pgdrain runs its TypeScript directly on Node >= 22.12 (type
// stripping) and wrangler needs it too; say so plainly instead of failing on a ".ts" extension.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 12)) {
  console.error(`pgdrain needs Node.js >= 22.12; this is ${process.version}. Install a current Node (or run \`source .ci/node-env.sh\`, which fetches Node 24 from npm) and try again.`);
  process.exit(1);
}
