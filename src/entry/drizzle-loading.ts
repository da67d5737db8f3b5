// Loading drizzle-orm in a Node process, quicker. Its package.json is 179 KB, most of it its
// `exports` map, and Node looks up the package a file belongs to for every file it resolves (to
// tell its module format). For drizzle's ~460 files that lookup cost 0.5 s of every process start
// on Node 22.18 and 1.1 s on Node 24, so every `pgdrain` command took over a second. The hook below
// resolves the relative imports between drizzle-orm's own `.js` files directly (a URL relative to
// the importing file) and gives them the format Node gave the first of them, so the lookup runs
// once. Everything else resolves as it always does. Registered by the `pgdrain` command before it
// loads the rest; a library importing pgdrain is left alone.
// The module as a whole, not a named import: on a Node without registerHooks (20) a named import
// fails at link time, before the command can say which Node it needs.
import nodeModule from 'node:module';

const DRIZZLE_FILES = '/node_modules/drizzle-orm/';

export function loadDrizzleQuicker(): void {
  let drizzleFormat: string | undefined;
  nodeModule.registerHooks?.({
    resolve(specifier, context, nextResolve) {
      const parent = context.parentURL;
      const withinDrizzle =
        parent?.includes(DRIZZLE_FILES) &&
        parent.endsWith('.js') &&
        (specifier.startsWith('./') || specifier.startsWith('../')) &&
        specifier.endsWith('.js');
      if (!withinDrizzle) return nextResolve(specifier, context);
      if (drizzleFormat !== undefined)
        return { url: new URL(specifier, parent).href, format: drizzleFormat, shortCircuit: true };
      const resolved = nextResolve(specifier, context);
      if (resolved.url.includes(DRIZZLE_FILES)) drizzleFormat = resolved.format ?? undefined;
      return resolved;
    },
  });
}
