export const UNBUNDLED_COMMANDS: Set<string>;
export const UNBUNDLED_IMPORTS: string[];
export const LOAD_TIME_ENV: string[];
export const SNAPSHOT_SKIPPED: string[];
export function runsFromBundle(cmd: string | undefined, env: NodeJS.ProcessEnv): boolean;
export function runsFromSnapshot(cmd: string | undefined, env: NodeJS.ProcessEnv): boolean;
export function noSnapshotCases(): string;
