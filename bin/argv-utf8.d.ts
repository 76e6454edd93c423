export function invalidUtf8Arg(args: readonly string[], cmdline: Uint8Array): string | null;
export function refuseNonUtf8Args(args?: readonly string[]): void;
