import { unlinkSync } from "node:fs";

const UNLINK_REFUSALS: Record<string, string> = {
  EPERM: "EPERM (operation not permitted: an immutable file or dir, chattr -i; or a security policy)",
  EROFS: "EROFS (its filesystem is read-only now)",
  EACCES: "EACCES (permission denied)",
};

/**
 * Unlinks `file` (gone already is fine); why it stays otherwise. Not rmSync:
 * its force falls back to rmdir on EPERM and throws ENOTDIR (QA: a stack
 * trace from inject and every teardown after it).
 */
export function unlinkLeftover(file: string): string | null {
  try {
    unlinkSync(file);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    return (code && UNLINK_REFUSALS[code]) ?? code ?? (err as Error).message;
  }
}
