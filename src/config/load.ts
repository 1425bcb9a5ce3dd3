/**
 * The YAML policies file: read, parse (YAML 1.2 core schema, duplicate keys rejected), validate.
 * Every error is a SluiceError with code CONFIG whose message starts with the file name, then either the
 * line and column (YAML syntax) or the path inside the document (`policies.yaml: policies.free.period: ...`).
 */
import { readFile } from 'node:fs/promises';
import { LineCounter, parseDocument } from 'yaml';
import { SluiceError, configSourceError } from '../util/errors.js';
import { configFromDocument, type SluiceConfig } from './schema.js';

export type { EngineConfig, ServerConfig, SluiceConfig } from './schema.js';

/** Aliases a document may expand (a guard against "billion laughs" documents). */
const MAX_ALIAS_COUNT = 100;

/**
 * Parses and validates a policies document.
 *
 * @param text the YAML source (a leading BOM is ignored).
 * @param file the name error messages start with (a path, or e.g. `<built-in default>`).
 * @throws SluiceError code CONFIG: `<file>: line L, column C: invalid YAML: <reason>` for syntax errors,
 *   `<file>: <path>: <reason>` for invalid content.
 */
export function parseConfig(text: string, file: string): SluiceConfig {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text.replace(/^\uFEFF/, ''), { lineCounter, prettyErrors: false, uniqueKeys: true });
  const first = doc.errors[0];
  if (first !== undefined) {
    const { line, col } = lineCounter.linePos(first.pos[0]);
    const why = first.code === 'MULTIPLE_DOCS' ? 'a policies file holds a single YAML document' : firstLine(first.message);
    throw configSourceError(file, `line ${line}, column ${col}: invalid YAML: ${why}`);
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (e) {
    throw configSourceError(file, `invalid YAML: ${firstLine((e as Error).message)}`);
  }
  return configFromDocument(raw, file);
}

/**
 * Reads, parses and validates a policies file; messages start with `path` as given.
 * @throws SluiceError code CONFIG, as {@link parseConfig}, or `<path>: cannot read: <reason>`.
 */
export async function loadConfigFile(path: string): Promise<SluiceConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw configSourceError(path, `cannot read: ${firstLine((e as Error).message)}`);
  }
  return parseConfig(text, path);
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0];
}
