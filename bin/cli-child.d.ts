export function runChild(program: string, args: string[], env: NodeJS.ProcessEnv): void;
export const DAEMON_NODE_FLAGS: readonly string[];
export function reexecFlags(execArgv: readonly string[], args: readonly string[]): string[];
export const DAEMON_ENV: Readonly<Record<string, string>>;
export function reexecEnv(env: NodeJS.ProcessEnv, args: readonly string[]): NodeJS.ProcessEnv;
