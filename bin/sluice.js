#!/usr/bin/env node
// The `sluice` command: runs the built CLI (npm run build compiles it to dist/).
import { main } from '../dist/src/cli/index.js';

main(process.argv.slice(2)).then(
  (code) => { if (typeof code === 'number') process.exitCode = code; },
  (e) => { process.stderr.write(`sluice: ${e && e.message ? e.message : e}\n`); process.exitCode = 1; },
);
