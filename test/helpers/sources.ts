import { readdirSync } from 'node:fs';
import { join } from 'node:path';

/** The repository's src/ folder. */
export const SRC = join(import.meta.dirname, '..', '..', 'src');

/** Every .ts file under `dir` (declaration files excluded), as absolute paths. */
export function sourceFiles(dir: string = SRC): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}
