import { describe, expect, it } from "vitest";
import { parseDrillFile } from "../../src/drill/drillFile.js";
import { fileDirBytes } from "../../src/drill/up.js";

const M = 1024 * 1024;
const drill = (phases: string) =>
  parseDrillFile(
    `name: fd\nduration: 60s\ncgroup:\n  memory_max: 256M\nworker:\n  weights: 64M\ngate:\n  psi_limit: 10\nphases:\n${phases}`,
    "fd.yaml",
  );

// doctor's room check on --file-dir: the weights file stays for the whole
// drill; a thrash hog's file comes beside it; an anon hog writes no file.
describe("fileDirBytes: what a drill puts on --file-dir at once", () => {
  it("weights plus the largest thrash file, one inject at a time", () => {
    const d = drill(`  - at: 0s\n    inject: { mode: thrash, size: 128M, hold: 5s }\n  - at: 10s\n    inject: { mode: thrash, size: 96M, hold: 5s }\n`);
    expect(fileDirBytes(d)).toBe(64 * M + 128 * M);
  });
  it("an anon inject needs no room on disk, however large", () => {
    const d = drill(`  - at: 0s\n    inject: { mode: anon, size: 200M, hold: 5s }\n`);
    expect(fileDirBytes(d)).toBe(64 * M);
  });
});
