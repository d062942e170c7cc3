#!/usr/bin/env python3
"""pagetoucher fallback: the same command line and stdout protocol as
native/pagetoucher.c (read the comment block at its top), for hosts where the
C helper could not be built. python's mmap takes real page faults, so the
pressure is real, only slower per page; the hello line says
impl=python-fallback so every report can say which one ran.
"""
import ctypes
import mmap
import os
import select
import signal
import sys
import time

EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 1, 2, 3
DEFAULT_MAX_LIFETIME_MS = 3_600_000
# drill's longest duration; a lifetime is a hold plus a self-exit grace, so it gets a day more
MAX_HOLD_MS = 7 * 24 * 3600 * 1000
MAX_LIFETIME_MS = 8 * 24 * 3600 * 1000
PROGRESS_S = 0.1
CHECK_EVERY_PAGES = 256
FILL_CHUNK = 1 << 20
SYNC_EVERY = 8 << 20
FREE_SPACE_MARGIN = 64 << 20
TMPFS_MAGIC, RAMFS_MAGIC = 0x01021994, 0x858458F6
MASK64 = (1 << 64) - 1
USAGE = (
    "usage: pagetoucher anon --size SIZE [--hold-ms MS] [--max-lifetime-ms MS]\n"
    "       pagetoucher thrash --file PATH --size SIZE [--hold-ms MS] [--order random|seq] [--advice normal|random]\n"
    "                          [--seed N] [--max-lifetime-ms MS]\n"
    "       pagetoucher serve --file PATH --size SIZE [--advice normal|random] [--seed N] [--max-lifetime-ms MS]\n"
)
PAGE = mmap.PAGESIZE


class Usage(Exception):
    pass


class Stop(Exception):
    """A stop reason (signal, stdout gone, max lifetime) unwinds to main."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


state = {"signal": 0, "stdout_gone": False, "deadline": 0.0, "created": None}


def now():
    return time.monotonic()


def say(line):
    if state["stdout_gone"]:
        return
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        state["stdout_gone"] = True


def error(message):
    sys.stderr.write("error: %s\n" % message)
    sys.stderr.flush()


def check_stdout():
    try:
        poller = select.poll()
        poller.register(1, 0)
        for _fd, events in poller.poll(0):
            if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                state["stdout_gone"] = True
    except (OSError, ValueError):
        pass


def check_stop():
    check_stdout()
    if state["signal"]:
        raise Stop("signal")
    if state["stdout_gone"]:
        raise Stop("stdout")
    if now() >= state["deadline"]:
        raise Stop("max-lifetime")


def on_signal(signum, _frame):
    state["signal"] = signum


def cleanup_file():
    path = state["created"]
    state["created"] = None
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            error("cannot unlink %s: %s" % (path, exc.strerror))


def parse_u64(text):
    if not text or not text.isdigit() or not text.isascii():
        raise ValueError(text)
    value = int(text)
    if value > MASK64:
        raise ValueError(text)
    return value


def parse_size(text):
    digits = len(text) - len(text.lstrip("0123456789"))
    if digits == 0 or digits > 20:
        raise ValueError(text)
    value, unit = parse_u64(text[:digits]), text[digits:]
    shifts = {"": 0, "K": 10, "k": 10, "M": 20, "m": 20, "G": 30, "g": 30, "T": 40, "t": 40}
    if unit == "":
        return value
    if unit[0] not in shifts or unit[1:] not in ("", "B", "iB"):
        raise ValueError(text)
    value <<= shifts[unit[0]]
    if value > MASK64:
        raise ValueError(text)
    return value


def parse_args(argv):
    if len(argv) < 2:
        raise Usage("missing mode (anon, thrash or serve)")
    mode = argv[1]
    if mode not in ("anon", "thrash", "serve"):
        raise Usage('unknown mode "%s" (anon, thrash or serve)' % mode)
    o = {"mode": mode, "file": None, "size": None, "hold_ms": 0, "max_lifetime_ms": DEFAULT_MAX_LIFETIME_MS,
         "order": "random", "advice": "normal", "seed": None}
    seen = set()
    i = 2
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        i += 2
        if value is None:
            raise Usage("%s needs a value" % flag)
        if flag in seen:
            raise Usage("%s given twice" % flag)
        seen.add(flag)
        if flag == "--size":
            try:
                o["size"] = parse_size(value)
            except ValueError:
                o["size"] = 0
            if o["size"] == 0:
                raise Usage('--size: "%s" is not a size (bytes, or e.g. 256M, 1G)' % value)
        elif flag == "--hold-ms":
            if mode == "serve":
                raise Usage("--hold-ms is not valid for serve (it runs until quit or EOF)")
            try:
                o["hold_ms"] = parse_u64(value)
            except ValueError:
                o["hold_ms"] = MAX_HOLD_MS + 1
            if o["hold_ms"] > MAX_HOLD_MS:
                raise Usage('--hold-ms: "%s" is not whole milliseconds up to 7 days' % value)
        elif flag == "--max-lifetime-ms":
            try:
                o["max_lifetime_ms"] = parse_u64(value)
            except ValueError:
                o["max_lifetime_ms"] = 0
            if o["max_lifetime_ms"] == 0 or o["max_lifetime_ms"] > MAX_LIFETIME_MS:
                raise Usage('--max-lifetime-ms: "%s" is not whole milliseconds from 1 to 8 days' % value)
        elif flag == "--file":
            if mode == "anon":
                raise Usage("--file is not valid for anon (it maps anonymous memory)")
            if value == "":
                raise Usage("--file is empty")
            o["file"] = value
        elif flag == "--order":
            if mode != "thrash":
                raise Usage("--order is only valid for thrash (serve takes it per pass command)")
            if value not in ("random", "seq"):
                raise Usage('--order: "%s" is not random or seq' % value)
            o["order"] = value
        elif flag == "--advice":
            if mode == "anon":
                raise Usage("--advice is not valid for anon")
            if value not in ("normal", "random"):
                raise Usage('--advice: "%s" is not normal or random' % value)
            o["advice"] = value
        elif flag == "--seed":
            if mode == "anon":
                raise Usage("--seed is not valid for anon")
            try:
                o["seed"] = parse_u64(value)
            except ValueError:
                raise Usage('--seed: "%s" is not a whole number' % value) from None
        else:
            raise Usage('unknown flag "%s"' % flag)
    if o["size"] is None:
        raise Usage("--size is required")
    if mode != "anon" and o["file"] is None:
        raise Usage("--file is required for %s" % mode)
    if o["seed"] is None:
        o["seed"] = (int(time.time()) ^ (os.getpid() << 32)) & MASK64
    if (o["size"] + PAGE - 1) // PAGE > 0xFFFFFFFF or o["size"] > sys.maxsize // 2:
        raise Usage("--size is too large")
    return o


def splitmix64(rng):
    rng[0] = (rng[0] + 0x9E3779B97F4A7C15) & MASK64
    z = rng[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def shuffle(perm, rng):
    """Fisher-Yates with the C helper's splitmix64: same seed, same order."""
    for i in range(len(perm), 1, -1):
        j = splitmix64(rng) % i
        perm[i - 1], perm[j] = perm[j], perm[i - 1]


def fs_type(directory):
    """statfs(2) f_type; os.statvfs has none. f_type is the first long of struct statfs."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if libc.statfs(os.fsencode(directory), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def check_directory(path, size):
    directory = os.path.dirname(path) or "."
    try:
        ftype = fs_type(directory)
        vfs = os.statvfs(directory)
    except OSError as exc:
        error("cannot stat directory %s of %s: %s" % (directory, path, exc.strerror))
        return EXIT_REFUSED if isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno in (2, 20) else EXIT_FAILED
    if ftype in (TMPFS_MAGIC, RAMFS_MAGIC):
        error("refusing %s: %s is %s; its pages are shmem, not reclaimable without swap "
              "(an OOM, not thrash); use a disk filesystem such as /var/tmp"
              % (path, directory, "tmpfs" if ftype == TMPFS_MAGIC else "ramfs"))
        return EXIT_REFUSED
    avail = vfs.f_bavail * vfs.f_frsize
    if avail < size + FREE_SPACE_MARGIN:
        error("refusing %s: %s has %d MiB free, needs %d MiB for the file plus %d MiB margin"
              % (path, directory, avail >> 20, (size + (1 << 20) - 1) >> 20, FREE_SPACE_MARGIN >> 20))
        return EXIT_REFUSED
    return 0


def map_fresh_file(o):
    """Creates PATH fresh, fills it by writing from this process (charging its
    page cache to our cgroup), maps it. Returns (status, mmap or None)."""
    status = check_directory(o["file"], o["size"])
    if status:
        return status, None
    try:
        fd = os.open(o["file"], os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        error("refusing %s: it already exists (the file must be created fresh inside the cgroup; "
              "remove a stale one first)" % o["file"])
        return EXIT_REFUSED, None
    except OSError as exc:
        error("cannot create %s: %s" % (o["file"], exc.strerror))
        return EXIT_FAILED, None
    state["created"] = o["file"]
    try:
        chunk = bytes((i * 131 + 7) & 0xFF for i in range(FILL_CHUNK))
        written, synced, last_print = 0, 0, now()
        size = o["size"]
        while written < size:
            n = os.write(fd, chunk[: min(FILL_CHUNK, size - written)])
            written += n
            # No sync_file_range in python: fdatasync bounds the dirty pages
            # a v1 memory cgroup would otherwise OOM on.
            if written - synced >= SYNC_EVERY:
                os.fdatasync(fd)
                synced = written
            if now() - last_print >= PROGRESS_S:
                say("touched %d" % written)
                last_print = now()
            check_stop()
        os.fdatasync(fd)
        return 0, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    except OSError as exc:
        error("cannot write or map %s: %s" % (o["file"], exc.strerror))
        return EXIT_FAILED, None
    finally:
        os.close(fd)


def touch_pass(mem, pages, perm, until, reads=None):
    """Reads one byte of every page (perm order when given). Returns True when
    the pass completed, False when the hold ran out first."""
    acc = 0
    order = perm if perm is not None else range(pages)
    for i, page in enumerate(order):
        acc ^= mem[page * PAGE]
        if i % CHECK_EVERY_PAGES == CHECK_EVERY_PAGES - 1:
            if reads is not None:
                reads["pages"] += CHECK_EVERY_PAGES
                t = now()
                if t - reads["last"] >= 1.0:
                    say("reads %d %d" % (reads["pages"], int((t - reads["since"]) * 1e6)))
                    reads["last"] = t
            check_stop()
            if until and now() >= until:
                return False
    return True


def run_anon(o):
    size = o["size"]
    mem = mmap.mmap(-1, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    last_print = now()
    for i, off in enumerate(range(0, size, PAGE)):
        mem[off] = 1
        if i % CHECK_EVERY_PAGES == CHECK_EVERY_PAGES - 1:
            if now() - last_print >= PROGRESS_S:
                say("touched %d" % (off + PAGE))
                last_print = now()
            check_stop()
    say("packed %d" % size)
    hold_until = now() + o["hold_ms"] / 1000
    while now() < hold_until:
        check_stop()
        time.sleep(min(PROGRESS_S, max(0.0, hold_until - now())))
    check_stop()
    return "hold"


def run_thrash(o):
    status, mem = map_fresh_file(o)
    if status:
        return status
    pages = (o["size"] + PAGE - 1) // PAGE
    perm = list(range(pages)) if o["order"] == "random" else None
    rng = [o["seed"]]
    if o["advice"] == "random":
        mem.madvise(mmap.MADV_RANDOM)
    say("packed %d" % o["size"])
    start = now()
    hold_until = start + o["hold_ms"] / 1000
    reads = {"pages": 0, "since": start, "last": start}
    passes, last_print = 0, 0.0
    while True:
        check_stop()
        t0 = now()
        if t0 >= hold_until:
            break
        if perm is not None:
            shuffle(perm, rng)
        if not touch_pass(mem, pages, perm, hold_until, reads):
            break
        t1 = now()
        if t1 >= hold_until:
            break
        passes += 1
        if t1 - last_print >= PROGRESS_S:
            say("pass %d %d" % (passes, int((t1 - t0) * 1e6)))
            last_print = t1
    mem.close()
    return "hold"


def run_serve(o):
    status, mem = map_fresh_file(o)
    if status:
        return status
    pages = (o["size"] + PAGE - 1) // PAGE
    perm = list(range(pages))
    rng = [o["seed"]]
    if o["advice"] == "random":
        mem.madvise(mmap.MADV_RANDOM)
    say("ready %d" % o["size"])
    buf = b""
    while True:
        check_stop()
        try:
            readable, _, _ = select.select([0], [], [], PROGRESS_S)
        except InterruptedError:
            continue
        if not readable:
            continue
        data = os.read(0, 4096)
        if not data:
            mem.close()
            return "eof"
        buf += data
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.rstrip(b"\r").decode("utf-8", "replace")
            if len(raw) > 255:
                say("err command too long")
            elif line == "quit":
                mem.close()
                return "quit"
            elif line in ("pass", "pass seq", "pass random"):
                random_order = line == "pass random"
                if random_order:
                    shuffle(perm, rng)
                t0 = now()
                touch_pass(mem, pages, perm if random_order else None, 0)
                say("done %d" % int((now() - t0) * 1e6))
            else:
                say("err unknown command (pass, pass seq, pass random, quit)")
        if len(buf) > 255:
            buf = b""
            say("err command too long")


def main(argv):
    try:
        o = parse_args(argv)
    except Usage as exc:
        sys.stderr.write("error: %s\n%s" % (exc, USAGE))
        return EXIT_USAGE
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    state["deadline"] = now() + o["max_lifetime_ms"] / 1000
    extra = ""
    if o["mode"] == "thrash":
        extra = " order=%s advice=%s seed=%d" % (o["order"], o["advice"], o["seed"])
    elif o["mode"] == "serve":
        extra = " advice=%s seed=%d" % (o["advice"], o["seed"])
    say("hello impl=python-fallback mode=%s pid=%d page=%d size=%d%s" % (o["mode"], os.getpid(), PAGE, o["size"], extra))
    try:
        run = {"anon": run_anon, "thrash": run_thrash, "serve": run_serve}[o["mode"]]
        result = run(o)
    except Stop as stop:
        cleanup_file()
        if stop.reason == "signal":
            signum = state["signal"]
            say("exit signal %s" % signal.Signals(signum).name)
            return 128 + signum
        if stop.reason == "stdout":
            return EXIT_FAILED
        say("exit max-lifetime")
        return 0
    except (OSError, MemoryError) as exc:
        cleanup_file()
        error("%s failed: %s" % (o["mode"], exc))
        return EXIT_FAILED
    cleanup_file()
    if isinstance(result, int):
        return result
    say("exit %s" % result)
    return EXIT_FAILED if state["stdout_gone"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
