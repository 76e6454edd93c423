export type Stamp = [string, string, string, string, string];
export function stamp(file: string): Stamp;
export function same(a: readonly string[], b: readonly string[]): boolean;
export function inputsCurrent(inputs: unknown): boolean;
