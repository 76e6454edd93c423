export const LOADERS: Record<string, string>;
export const EXTERNAL_PACKAGES: string[];
export function cacheDirFor(root: string, cacheRoot?: string): string;
/** The bundle's entry file when every input it was built from is unchanged, else undefined. */
export function currentBundle(dir: string): string | undefined;
