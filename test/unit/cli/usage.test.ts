/**
 * The CLI's flag table (src/cli/usage.ts) against what reads it and what documents it: each command's parser
 * takes its options from the table, so every flag it accepts is a row; these tests hold the synopsis, the
 * help, the README's CLI section and the environment variables the source reads to the same rows.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { COMMANDS, USAGE, commandHelp, environmentOf, parseCommand, type CommandName, type CommandSpec } from '../../../src/cli/usage.js';

const ROOT = process.cwd();
const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const names = Object.keys(COMMANDS) as CommandName[];
const spec = (n: CommandName): CommandSpec => COMMANDS[n];

/** The README's `## CLI` section, whitespace runs made one space. */
const cliSection = README.slice(README.indexOf('\n## CLI\n'), README.indexOf('\n## ', README.indexOf('\n## CLI\n') + 1));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

describe('the CLI flag table', () => {
  it.each(names)('%s: the synopsis names exactly the flags its parser accepts', (name) => {
    const named = [...spec(name).synopsis.matchAll(/--([a-z][a-z-]*)/g)].map((m) => m[1]);
    expect([...new Set(named)].sort()).toStrictEqual(Object.keys(spec(name).flags).sort());
  });

  it.each(names)('%s --help lists every flag with the variables it reads, and every other variable', (name) => {
    const help = commandHelp(name);
    for (const [flag, f] of Object.entries(spec(name).flags)) {
      const line = help.split('\n').find((l) => l.startsWith(`  --${flag} `) || l.startsWith(`  -${f.short ?? '?'}, --${flag} `));
      expect(line, `--${flag}`).toBeDefined();
      for (const v of f.env ?? []) expect(line, `--${flag}`).toContain(`[env ${v}]`);
    }
    for (const v of Object.keys(spec(name).env ?? {})) expect(help).toMatch(new RegExp(`^  ${v} `, 'm'));
  });

  it('every flag of the table is one the parser accepts (and a value flag takes a value)', () => {
    for (const name of names) {
      for (const [flag, f] of Object.entries(spec(name).flags)) {
        const { values } = parseCommand(name, f.arg === undefined ? [`--${flag}`] : [`--${flag}`, 'v']);
        expect((values as Record<string, unknown>)[flag], `${name} --${flag}`).toStrictEqual(f.arg === undefined ? true : f.multiple ? ['v'] : 'v');
      }
    }
  });

  it('the environment variables the source reads are exactly those of the table, and the global usage lists them all', () => {
    const read = new Set<string>();
    for (const file of sourceFiles(path.join(ROOT, 'src'))) {
      for (const m of readFileSync(file, 'utf8').matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g)) read.add(m[1]);
    }
    // set by the shard pool for its own workers (src/shard/pool.ts), not an operator's setting
    read.delete('SLUICE_SHARD');
    const table = [...new Set(names.flatMap(environmentOf))];
    expect([...read].sort()).toStrictEqual([...table].sort());
    const listed = /^environment: (.*)$/m.exec(USAGE)![1].split(', ');
    expect(listed.sort()).toStrictEqual([...table].sort());
  });
});

describe('README: CLI', () => {
  it('its usage block is every command\'s synopsis', () => {
    const block = /```\n(sluice serve[\s\S]*?)```/.exec(cliSection)![1];
    const expected = names.map((n) => spec(n).synopsis).join('\n').split('\n').map((l) => l.slice(2)).join('\n') + '\nsluice --version\n';
    expect(block).toBe(expected);
  });

  it('its environment paragraph names every variable with the flag it stands for', () => {
    const text = cliSection.replace(/\s+/g, ' ');
    for (const name of names) {
      for (const [flag, f] of Object.entries(spec(name).flags)) {
        for (const v of f.env ?? []) expect(text).toMatch(new RegExp(`\`${v}\` \\(\`(${name} )?--${flag}\``));
      }
      for (const v of Object.keys(spec(name).env ?? {})) expect(text).toContain(`\`${v}\``);
    }
  });
});
