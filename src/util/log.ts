import { badSetting } from './errors.js';
import { pino, type Logger } from 'pino';

/** The structured JSON logger (pino) at LOG_LEVEL (default info), to stdout. */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info'): Logger {
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
  if (!levels.includes(level)) throw badSetting('LOG_LEVEL', `LOG_LEVEL must be one of ${levels.join(', ')} (got ${JSON.stringify(level)})`);
  return pino({ name: 'sluice', level });
}
