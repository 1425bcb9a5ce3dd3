// The slice of the WebAssembly JS API sluice uses. TypeScript ships these types only in lib.dom, and
// @types/node adds them from Node 22 on; Node 20 has the API itself.
declare namespace WebAssembly {
  class Module {
    constructor(bytes: BufferSource);
  }
  class Instance {
    constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
    readonly exports: Record<string, unknown>;
  }
  class Memory {
    readonly buffer: ArrayBuffer;
  }
  type BufferSource = ArrayBufferView | ArrayBuffer;
}
