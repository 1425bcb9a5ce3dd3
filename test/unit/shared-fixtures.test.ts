/**
 * The checkout's copies of the shared reference files (test/fixtures/shared/, used when the project's
 * `shared/` folder is not beside the checkout: test/helpers/shared.ts) are byte for byte the shared folder's,
 * wherever that folder is present. When this fails, shared/ changed: copy the file named into
 * test/fixtures/shared/.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FIXTURE_DIR, SHARED_DIR, SHARED_FILES } from '../helpers/shared.js';

describe('test/fixtures/shared', () => {
  for (const rel of SHARED_FILES) {
    it(`holds ${rel}`, () => {
      expect(existsSync(path.join(FIXTURE_DIR, rel))).toBe(true);
    });
    it.skipIf(!existsSync(path.join(SHARED_DIR, rel)))(`${rel} equals ../shared/${rel}`, () => {
      const copy = readFileSync(path.join(FIXTURE_DIR, rel));
      expect(copy.equals(readFileSync(path.join(SHARED_DIR, rel))), `copy ../shared/${rel} into test/fixtures/shared/${rel}`).toBe(true);
    });
  }
});
