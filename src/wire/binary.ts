/**
 * The binary frame format of `/v1/stream`, version 1, lives in three files that the server, the client and the
 * tests import directly: binary-format.ts (the layout, its constants and types, the frame header, UTF-8
 * reads), binary-read.ts (decoding checks, unsubscribe and answers frames), binary-write.ts (encoding:
 * FrameWriter).
 *
 * This file only keeps the names bench/tools/stream-cpu-ab.mjs loads from the built `dist/src/wire/binary.js`;
 * nothing under src/ imports it. Delete it once that tool imports binary-format.js and binary-write.js.
 */
export { ANSWER_HEAD, FRAME_CHECKS, FRAME_HEADER } from './binary-format.js';
export { FrameWriter } from './binary-write.js';
