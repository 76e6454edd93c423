export function userCacheDir(env: NodeJS.ProcessEnv): string | undefined;
export function startBuilt(build: string, script: string, args: readonly string[], env?: NodeJS.ProcessEnv): Promise<boolean>;
