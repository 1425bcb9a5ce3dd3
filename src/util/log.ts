import { pino, type Logger } from 'pino';

/** The structured JSON logger (pino) at LOG_LEVEL (default info), to stdout. */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ name: 'sluice', level });
}
