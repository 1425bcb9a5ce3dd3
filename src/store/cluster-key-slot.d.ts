// cluster-key-slot 1.1.1 ships no types: the Redis Cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16,384),
// the function ioredis's Cluster routes by.
declare module 'cluster-key-slot' {
  function calculateSlot(key: string | Buffer): number;
  export default calculateSlot;
}
