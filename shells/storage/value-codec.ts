/**
 * Deterministic tagged binary codec for the values the cores persist
 * (PersistRecord.value): plain objects, arrays, strings, numbers (including
 * -0, NaN, +-Infinity), bigints of any size, booleans, null, undefined,
 * Uint8Array (Buffer decodes as Uint8Array) and Maps. protobuf-es v2
 * messages are plain objects with a `$typeName` key, so they round-trip as
 * objects and stay usable with toBinary/create after decoding.
 *
 * Canonical: object keys are written sorted (UTF-16 code unit order), so two
 * equal values always encode to the same bytes whatever their construction
 * order. Anything else (functions, symbols, class instances, other typed
 * arrays, cycles) throws a TypeError: the cores promise plain data, and a
 * silent lossy encoding would be a durability bug.
 *
 * Format: one tag byte per value, then
 *   0 null | 1 undefined | 2 false | 3 true
 *   4 float64 (8 bytes LE)           any number that is not a small integer
 *   5 integer (zigzag varint)        integers with |n| < 2^52, except -0
 *   6 bigint: u8 sign (0 +, 1 -), varint byte count, magnitude bytes LE
 *   7 string: varint byte length, UTF-8
 *   8 bytes:  varint length, raw bytes
 *   9 array:  varint count, items
 *  10 object: varint count, (string key without tag, value) pairs, keys sorted
 *  11 map:    varint count, (key value, value) pairs in insertion order
 *  12 object with a null prototype: as 10
 * Varints are unsigned LEB128 of at most 53 bits.
 */

const T_NULL = 0;
const T_UNDEFINED = 1;
const T_FALSE = 2;
const T_TRUE = 3;
const T_F64 = 4;
const T_INT = 5;
const T_BIGINT = 6;
const T_STRING = 7;
const T_BYTES = 8;
const T_ARRAY = 9;
const T_OBJECT = 10;
const T_MAP = 11;
const T_NULL_PROTO_OBJECT = 12;

const MAX_DEPTH = 256;
const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

class Writer {
  buf = new Uint8Array(256);
  len = 0;
  private view = new DataView(this.buf.buffer);

  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  byte(b: number): void {
    this.ensure(1);
    this.buf[this.len++] = b;
  }

  varint(n: number): void {
    this.ensure(8);
    while (n >= 0x80) {
      this.buf[this.len++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    this.buf[this.len++] = n;
  }

  f64(n: number): void {
    this.ensure(8);
    this.view.setFloat64(this.len, n, true);
    this.len += 8;
  }

  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  string(s: string): void {
    // Short ASCII strings (keys, ids, states: most of a record) are written
    // directly: the same bytes as UTF-8 with a one-byte varint length, without
    // the allocation TextEncoder.encode makes per string.
    const n = s.length;
    if (n < 0x80) {
      let ascii = true;
      for (let i = 0; i < n; i++) {
        if (s.charCodeAt(i) >= 0x80) {
          ascii = false;
          break;
        }
      }
      if (ascii) {
        this.ensure(n + 1);
        const buf = this.buf;
        let at = this.len;
        buf[at++] = n;
        for (let i = 0; i < n; i++) buf[at++] = s.charCodeAt(i);
        this.len = at;
        return;
      }
    }
    const b = enc.encode(s);
    this.varint(b.length);
    this.bytes(b);
  }
}

function isPlainObject(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function writeValue(w: Writer, v: unknown, depth: number, seen: Set<object>): void {
  if (depth > MAX_DEPTH) throw new TypeError("value-codec: nesting deeper than 256");
  switch (typeof v) {
    case "undefined":
      w.byte(T_UNDEFINED);
      return;
    case "boolean":
      w.byte(v ? T_TRUE : T_FALSE);
      return;
    case "number":
      // Zigzag doubles the magnitude: only integers up to 2^52 stay exact.
      if (Number.isInteger(v) && Math.abs(v) < 2 ** 52 && !Object.is(v, -0)) {
        w.byte(T_INT);
        // zigzag without 32-bit overflow
        w.varint(v >= 0 ? v * 2 : -v * 2 - 1);
      } else {
        w.byte(T_F64);
        w.f64(v);
      }
      return;
    case "bigint": {
      w.byte(T_BIGINT);
      let mag = v < 0n ? -v : v;
      w.byte(v < 0n ? 1 : 0);
      const out: number[] = [];
      while (mag > 0n) {
        out.push(Number(mag & 0xffn));
        mag >>= 8n;
      }
      w.varint(out.length);
      w.bytes(Uint8Array.from(out));
      return;
    }
    case "string":
      w.byte(T_STRING);
      w.string(v);
      return;
    case "object":
      break;
    default:
      throw new TypeError(`value-codec: cannot encode a ${typeof v}`);
  }
  if (v === null) {
    w.byte(T_NULL);
    return;
  }
  if (v instanceof Uint8Array) {
    w.byte(T_BYTES);
    w.varint(v.length);
    w.bytes(v);
    return;
  }
  if (seen.has(v)) throw new TypeError("value-codec: cyclic value");
  seen.add(v);
  try {
    if (Array.isArray(v)) {
      w.byte(T_ARRAY);
      w.varint(v.length);
      for (let i = 0; i < v.length; i++) writeValue(w, v[i], depth + 1, seen);
      return;
    }
    if (v instanceof Map) {
      w.byte(T_MAP);
      w.varint(v.size);
      for (const [k, x] of v) {
        writeValue(w, k, depth + 1, seen);
        writeValue(w, x, depth + 1, seen);
      }
      return;
    }
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) throw new TypeError(`value-codec: only Uint8Array is supported, got ${v.constructor.name}`);
    if (!isPlainObject(v)) throw new TypeError(`value-codec: cannot encode an instance of ${(v as object).constructor?.name ?? "?"}`);
    const keys = Object.keys(v).sort();
    w.byte(Object.getPrototypeOf(v) === null ? T_NULL_PROTO_OBJECT : T_OBJECT);
    w.varint(keys.length);
    for (const k of keys) {
      w.string(k);
      writeValue(w, (v as Record<string, unknown>)[k], depth + 1, seen);
    }
  } finally {
    seen.delete(v);
  }
}

/** Encode a value; throws TypeError for anything that is not plain data. */
export function encodeValue(v: unknown): Uint8Array {
  const w = new Writer();
  writeValue(w, v, 0, new Set());
  return w.buf.slice(0, w.len);
}

class Reader {
  pos = 0;
  private readonly view: DataView;
  constructor(readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  need(n: number): void {
    if (this.pos + n > this.buf.length) throw new RangeError("value-codec: truncated input");
  }

  byte(): number {
    this.need(1);
    return this.buf[this.pos++]!;
  }

  varint(): number {
    let n = 0;
    let mul = 1;
    for (let i = 0; i < 8; i++) {
      const b = this.byte();
      n += (b & 0x7f) * mul;
      if (b < 0x80) {
        if (!Number.isSafeInteger(n)) throw new RangeError("value-codec: varint beyond 2^53");
        return n;
      }
      mul *= 0x80;
    }
    throw new RangeError("value-codec: varint too long");
  }

  take(n: number): Uint8Array {
    this.need(n);
    const out = this.buf.slice(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  string(): string {
    const n = this.varint();
    this.need(n);
    const s = dec.decode(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
    return s;
  }

  f64(): number {
    this.need(8);
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }
}

function readValue(r: Reader, depth: number): unknown {
  if (depth > MAX_DEPTH) throw new RangeError("value-codec: nesting deeper than 256");
  const tag = r.byte();
  switch (tag) {
    case T_NULL:
      return null;
    case T_UNDEFINED:
      return undefined;
    case T_FALSE:
      return false;
    case T_TRUE:
      return true;
    case T_F64:
      return r.f64();
    case T_INT: {
      const z = r.varint();
      return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    }
    case T_BIGINT: {
      const neg = r.byte() === 1;
      const n = r.varint();
      const b = r.take(n);
      let v = 0n;
      for (let i = b.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(b[i]!);
      return neg ? -v : v;
    }
    case T_STRING:
      return r.string();
    case T_BYTES:
      return r.take(r.varint());
    case T_ARRAY: {
      const n = r.varint();
      const out: unknown[] = [];
      for (let i = 0; i < n; i++) out.push(readValue(r, depth + 1));
      return out;
    }
    case T_OBJECT:
    case T_NULL_PROTO_OBJECT: {
      const n = r.varint();
      const out: Record<string, unknown> = tag === T_OBJECT ? {} : Object.create(null);
      for (let i = 0; i < n; i++) {
        const k = r.string();
        const v = readValue(r, depth + 1);
        if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
        else out[k] = v;
      }
      return out;
    }
    case T_MAP: {
      const n = r.varint();
      const out = new Map<unknown, unknown>();
      for (let i = 0; i < n; i++) {
        const k = readValue(r, depth + 1);
        out.set(k, readValue(r, depth + 1));
      }
      return out;
    }
    default:
      throw new RangeError(`value-codec: unknown tag ${tag} at ${r.pos - 1}`);
  }
}

/** Decode what encodeValue wrote; throws RangeError on malformed input. */
export function decodeValue(bytes: Uint8Array): unknown {
  const r = new Reader(bytes);
  const v = readValue(r, 0);
  if (r.pos !== bytes.length) throw new RangeError(`value-codec: ${bytes.length - r.pos} trailing bytes`);
  return v;
}
