/**
 * The bounds of a key, shared by every layer that validates one (key derivation, the batch path, allow and
 * deny list entries) and by the hasher that sizes its batches by it. It lives here, below the engine and the
 * config, so that none of them reaches into the kernel wrapper for a rule about keys.
 */

/** Longest key, in bytes of UTF-8. */
export const MAX_KEY_BYTES = 1024;
