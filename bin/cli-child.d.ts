export function runChild(program: string, args: string[], env: NodeJS.ProcessEnv): void;
export const DAEMON_NODE_FLAGS: readonly string[];
export function reexecFlags(execArgv: readonly string[], args: readonly string[], nodeOptions?: string): string[];
export const DAEMON_ENV: Readonly<Record<string, string>>;
export function reexecEnv(env: NodeJS.ProcessEnv, args: readonly string[]): NodeJS.ProcessEnv;
export function lacksDaemonSettings(execArgv: readonly string[], args: readonly string[], env: NodeJS.ProcessEnv): boolean;
export function execDaemon(script: string, args: readonly string[]): void;
export const PARENT_PIPE_FD: number;
export function watchParent(fd: number): Promise<void>;
