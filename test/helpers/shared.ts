/**
 * The project's shared reference files the tests replay: the failure cases (`cases/cases.json`) and the
 * recorded access trace (`data/access-trace.csv`). They live in the project's `shared/` folder beside the
 * checkout (`../shared/`); a checkout on its own uses the copies in `test/fixtures/shared/`, which
 * test/unit/shared-fixtures.test.ts keeps equal to `../shared/` wherever that is present.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The project root (holds package.json). */
const ROOT = path.resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..');

/** The shared folder beside the checkout. */
export const SHARED_DIR = path.resolve(ROOT, '..', 'shared');

/** The copies that ship with the checkout. */
export const FIXTURE_DIR = path.join(ROOT, 'test', 'fixtures', 'shared');

/** The shared files the tests read, relative to the shared folder. */
export const SHARED_FILES = ['cases/cases.json', 'data/access-trace.csv'] as const;

/** Absolute path of shared file `rel`: `../shared/<rel>` when it exists, else the checkout's copy. */
export function sharedFile(rel: (typeof SHARED_FILES)[number]): string {
  const beside = path.join(SHARED_DIR, rel);
  return existsSync(beside) ? beside : path.join(FIXTURE_DIR, rel);
}

/** {@link sharedFile} relative to the project root (what the CLI tests pass, run from there). */
export function sharedFileFromRoot(rel: (typeof SHARED_FILES)[number]): string {
  return path.relative(ROOT, sharedFile(rel));
}
