import path from "node:path";
import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/errors.js";
import { absoluteDir } from "../../src/host/filesystem.js";
import { parseInjectFlags } from "../../src/commands/inject.run.js";
import { resolveFileDir } from "../../src/commands/up.js";
import { weightsDirOf } from "../../src/commands/worker.js";

// QA: up and doctor took `--file-dir files` against the cwd; a hand-run inject
// or worker refused the same words ("must be an absolute path").
describe("a relative --file-dir is the operator's cwd's, in every command", () => {
  it("absoluteDir resolves against the cwd and refuses empty, naming the flag", () => {
    expect(absoluteDir("files", "--file-dir", "/srv/x")).toBe("/srv/x/files");
    expect(absoluteDir("./files/", "--file-dir", "/srv/x")).toBe("/srv/x/files");
    expect(absoluteDir("/var/tmp", "--file-dir", "/srv/x")).toBe("/var/tmp");
    expect(() => absoluteDir("", "--weights-dir")).toThrow(new UsageError("--weights-dir: is empty"));
  });

  it("inject: --file-dir files is <cwd>/files; empty is refused", () => {
    const flags = { size: "8M", mode: "thrash", hold: "1s", fileDir: "files" };
    expect(parseInjectFlags(flags, null).fileDir).toBe(path.resolve("files"));
    expect(() => parseInjectFlags({ ...flags, fileDir: "" }, null)).toThrow("--file-dir: is empty");
  });

  it("worker: --file-dir and --weights-dir relative are <cwd>/…; empty is refused", () => {
    expect(weightsDirOf({ fileDir: "w" })).toEqual({ dir: path.resolve("w"), flag: "--file-dir" });
    expect(weightsDirOf({ weightsDir: "w" })).toEqual({ dir: path.resolve("w"), flag: "--weights-dir" });
    expect(() => weightsDirOf({ fileDir: "" })).toThrow("--file-dir: is empty");
  });

  it("up's resolveFileDir is the same resolution (plus: it must exist)", () => {
    expect(resolveFileDir(".", "/tmp")).toBe("/tmp");
    expect(() => resolveFileDir("", "/tmp")).toThrow("--file-dir: is empty");
  });
});
