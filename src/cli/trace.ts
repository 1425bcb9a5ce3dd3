/**
 * Reading a recorded trace as a stream of rows, for `sluice replay`: the file is parsed as it is read, so
 * memory does not grow with its length.
 */
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { parse } from 'csv-parse';
import { isSluiceError, traceError } from '../util/errors.js';

/**
 * Bytes read at a time. Smaller than the stream default (64 KiB): each chunk becomes a string the parser
 * holds while it cuts rows from it, and with 64 KiB chunks a 2 M-row replay peaked at ~98 MiB RSS against
 * ~91 MiB with 8 KiB, at the same speed (measured with 1, 2, 4, 8, 16 and 64 KiB).
 */
const READ_CHUNK_BYTES = 8192;

/** One row of a trace: its time (`ts_ms`, Unix ms) and every column by name. */
export interface TraceRow {
  t: number;
  fields: Record<string, string>;
}

export interface TraceSource {
  /** The trace's name in error messages; the file read when `csv` is not given. */
  file: string;
  /** The trace's CSV text, instead of reading `file`. */
  csv?: string;
  /** Called with the size of each chunk read (bytes of the file, or characters of `csv`). */
  onRead?: (n: number) => void;
}

/**
 * The rows of a CSV trace with a header row, in the file's order (empty lines skipped, fields trimmed).
 * @throws SluiceError INVALID_ARGUMENT naming the file: a header without a `ts_ms` column (naming the columns it
 *   has), a bad `ts_ms` (its row), a CSV syntax error, or `<file>: cannot read: <reason>` when the file cannot be
 *   read.
 */
export async function* readTrace(src: TraceSource): AsyncGenerator<TraceRow> {
  const input = src.csv !== undefined ? Readable.from([src.csv]) : createReadStream(src.file, { highWaterMark: READ_CHUNK_BYTES });
  const parser = parse({ columns: (header: string[]) => checkedHeader(src.file, header), skip_empty_lines: true, trim: true });
  let readError: Error | null = null;
  input.on('error', (e: Error) => {
    readError = e;
    parser.destroy(e);
  });
  if (src.onRead) {
    const onRead = src.onRead;
    input.on('data', (chunk: string | Buffer) => onRead(chunk.length));
  }
  input.pipe(parser);
  let i = 0;
  try {
    for await (const fields of parser as AsyncIterable<Record<string, string>>) {
      i++;
      const t = Number(fields.ts_ms);
      if (!/^\d+$/.test(fields.ts_ms ?? '') || !Number.isSafeInteger(t)) {
        throw traceError(src.file, `row ${i + 1}: ts_ms must be integer Unix ms (got ${JSON.stringify(fields.ts_ms)})`, 'ts_ms');
      }
      yield { t, fields };
    }
  } catch (e) {
    if (isSluiceError(e)) throw e;
    const why = (e as Error).message.split('\n', 1)[0];
    throw traceError(src.file, readError === null ? why : `cannot read: ${why}`);
  } finally {
    input.destroy();
    parser.destroy();
  }
}

/** The header row, as the parser's column names. @throws SluiceError INVALID_ARGUMENT when it lacks `ts_ms`. */
function checkedHeader(file: string, header: string[]): string[] {
  if (!header.includes('ts_ms')) {
    throw traceError(file, `the header row has no ts_ms column (each row's time, integer Unix ms); its columns: ${header.map((h) => JSON.stringify(h)).join(', ')}`, 'ts_ms');
  }
  return header;
}
