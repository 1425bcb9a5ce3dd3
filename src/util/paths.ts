import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/**
 * The package's root folder (the one holding package.json). Modules run from `src/` under vitest and from
 * `dist/src/` when built, so paths to build artefacts are resolved from here rather than from a module.
 */
export function packageRoot(): string {
  if (root !== undefined) return root;
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('sluice: package.json not found above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
  root = dir;
  return root;
}
