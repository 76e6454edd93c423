export function runChild(program: string, args: string[], env: NodeJS.ProcessEnv): void;
