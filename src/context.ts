import { HostRoots } from "./host/kernelFile.js";

/** Global flags of DESIGN.md, resolved once (flag, then env, then default). */
export interface GlobalOptions {
  redisUrl: string | undefined;
  procfs: string;
  sysfs: string;
  stateDir: string;
  json: boolean;
  color: boolean;
}

export function resolveGlobalOptions(raw: {
  redis?: string;
  procfs?: string;
  sysfs?: string;
  stateDir?: string;
  json?: boolean;
  color?: boolean;
}, env: NodeJS.ProcessEnv = process.env): GlobalOptions {
  return {
    redisUrl: raw.redis ?? env.DRILL_REDIS_URL ?? undefined,
    procfs: raw.procfs ?? env.DRILL_PROCFS ?? "/proc",
    sysfs: raw.sysfs ?? env.DRILL_SYSFS ?? "/sys",
    stateDir: raw.stateDir ?? env.DRILL_STATE_DIR ?? "/var/lib/drill",
    json: raw.json ?? false,
    color: raw.color !== false && env.NO_COLOR === undefined && env.FORCE_COLOR !== "0",
  };
}

export function hostRoots(options: Pick<GlobalOptions, "procfs" | "sysfs">): HostRoots {
  return new HostRoots(options.procfs, options.sysfs);
}

/**
 * Each command lives in src/commands/<name>.ts and exports a factory taking
 * `globals` (resolved lazily, after parsing) and returning its Command.
 * That file holds what --help needs (options, defaults, flag types); its
 * action imports src/commands/<name>.run.ts, the implementation, only when
 * the command runs, so start-up loads no Redis, YAML or zod.
 */
export type GlobalsFn = () => GlobalOptions;
