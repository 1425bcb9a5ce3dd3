import { usage } from '../util/errors.js';
import { loadConfigFile } from '../config/load.js';
import { defaultConfig } from '../config/default.js';
import type { SluiceConfig } from '../config/schema.js';

/** The config from --config (or SLUICE_CONFIG), else the built-in default. */
export async function configFrom(file: string | undefined): Promise<SluiceConfig> {
  const path = file ?? process.env.SLUICE_CONFIG;
  return path ? loadConfigFile(path) : defaultConfig();
}

/** Parses an integer option, naming it in the error. */
export function intArg(v: string | undefined, name: string, min: number, max: number): number | undefined {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) throw usage(`${name} must be an integer in [${min}, ${max}] (got ${JSON.stringify(v)})`, name);
  return n;
}
