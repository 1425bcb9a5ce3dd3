/**
 * The binary frame format of `/v1/stream`, version 1: the one door the server and the client import it by.
 * The format's parts: binary-format.ts (the layout, its constants and types, the frame header, UTF-8 reads),
 * binary-read.ts (decoding checks, unsubscribe and answers frames), binary-write.ts (encoding: FrameWriter).
 */
export {
  BINARY_VERSION, FRAME_CHECKS, FRAME_ANSWERS, FRAME_UNSUBSCRIBE, FRAME_HEADER, CHECK_HEAD, ANSWER_HEAD, MAX_FRAME_RECORDS,
  CHECK_SUBSCRIBE, CHECK_NO_WAIT, KIND_DENIED, KIND_ALLOWED, KIND_ERROR, KIND_READY, KIND_ENDED, ANSWER_NO_ID, ANSWER_SUBSCRIBED,
  ANSWER_DEGRADED, ANSWER_DELAYED, ANSWER_RULE_SHIFT, ANSWER_RULES, readUtf8, readHeader,
  type BinaryCheck, type BinaryAnswer, type FrameHeader,
} from './binary-format.js';
export {
  readChecks, readCheckColumns, readUnsubscribe, AnswerReader, readAnswers,
  type CheckSink, type CheckColumns, type RecordFault,
} from './binary-read.js';
export { FrameWriter, utf8Length } from './binary-write.js';
