/**
 * A Fetch-standard `Headers` class for the CLI bundle, in place of Node's
 * global one.
 *
 * Why: ConnectRPC builds a `Headers` for every request, response and error.
 * Node defines the global `Headers` as a lazy getter that loads its whole
 * undici bundle the first time it is read (the fetch implementation, its
 * dispatchers, and `node:http2` and `node:tls` under them): about 55 ms of a
 * 90 ms `rvbox clients` (docs/PERFORMANCE.md, "CLI start-up"). The CLI never
 * calls `fetch`, so it has no use for undici; the bundle builder
 * (bin/cli-bundle.js) injects this class for every free reference to
 * `Headers` in the bundled code (esbuild's `inject`), and nothing else in
 * the process (Node itself, the daemons, the TUI under tsx) sees it.
 *
 * Behaviour is the standard's (https://fetch.spec.whatwg.org/#headers-class):
 * names are case-insensitive and validated as HTTP tokens; values have
 * leading and trailing HTTP whitespace removed and may not hold NUL, CR, LF
 * or code points above 0xFF; `append` to a name already present joins the
 * values with ", " except for `set-cookie`, whose values stay separate
 * (`getSetCookie`); iteration is sorted by name. Guards (immutable request
 * headers) are not modelled: nothing in the CLI hands out a guarded object.
 * test/cli/headers.test.ts compares it with Node's own class on random
 * sequences of operations.
 */

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Leading/trailing HTTP whitespace: tab, LF, CR, space.
const EDGE_WS = /^[\t\n\r ]+|[\t\n\r ]+$/g;
// After trimming, a value may not contain NUL, LF or CR (nor anything past Latin-1: a ByteString).
const BAD_VALUE = /[\0\n\r\u0100-\uffff]/;

export type HeadersInit = Headers | Iterable<readonly [string, string] | string[]> | Record<string, string>;

function normalizeName(name: unknown): string {
  const s = String(name);
  if (!TOKEN.test(s)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(s)}`);
  return s.toLowerCase();
}

function normalizeValue(value: unknown): string {
  const s = String(value).replace(EDGE_WS, "");
  if (BAD_VALUE.test(s)) throw new TypeError(`Headers: invalid header value ${JSON.stringify(s)}`);
  return s;
}

export class Headers {
  /** Lower-case name -> its values in the order they were added. */
  readonly #values = new Map<string, string[]>();

  constructor(init?: HeadersInit | null) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object" && typeof init !== "function") throw new TypeError("Headers: init must be an object");
    const iter = (init as Partial<Iterable<unknown>>)[Symbol.iterator];
    if (typeof iter === "function") {
      for (const pair of init as Iterable<unknown>) {
        if (pair === null || typeof pair !== "object" || typeof (pair as Partial<Iterable<unknown>>)[Symbol.iterator] !== "function") {
          throw new TypeError("Headers: each init pair must be a sequence");
        }
        const items = [...(pair as Iterable<unknown>)];
        if (items.length !== 2) throw new TypeError("Headers: each init pair must have exactly two items");
        this.append(items[0] as string, items[1] as string);
      }
      return;
    }
    for (const key of Object.keys(init)) this.append(key, (init as Record<string, string>)[key]!);
  }

  append(name: string, value: string): void {
    const n = normalizeName(name);
    const v = normalizeValue(value);
    const list = this.#values.get(n);
    if (list === undefined) this.#values.set(n, [v]);
    else list.push(v);
  }

  set(name: string, value: string): void {
    const n = normalizeName(name);
    this.#values.set(n, [normalizeValue(value)]);
  }

  delete(name: string): void {
    this.#values.delete(normalizeName(name));
  }

  has(name: string): boolean {
    return this.#values.has(normalizeName(name));
  }

  get(name: string): string | null {
    const list = this.#values.get(normalizeName(name));
    return list === undefined ? null : list.join(", ");
  }

  getSetCookie(): string[] {
    return [...(this.#values.get("set-cookie") ?? [])];
  }

  /** The standard's "sort and combine": names in order, set-cookie values one by one. */
  #pairs(): Array<[string, string]> {
    const names = [...this.#values.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const out: Array<[string, string]> = [];
    for (const n of names) {
      const list = this.#values.get(n)!;
      if (n === "set-cookie") for (const v of list) out.push([n, v]);
      else out.push([n, list.join(", ")]);
    }
    return out;
  }

  forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void {
    for (const [n, v] of this.#pairs()) callback.call(thisArg, v, n, this);
  }

  *entries(): IterableIterator<[string, string]> {
    yield* this.#pairs();
  }

  *keys(): IterableIterator<string> {
    for (const [n] of this.#pairs()) yield n;
  }

  *values(): IterableIterator<string> {
    for (const [, v] of this.#pairs()) yield v;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}
