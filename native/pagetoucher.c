/*
 * pagetoucher: fault memory in one byte per page, so the kernel really has to
 * find (and, in a tight cgroup, reclaim and refault) every page. Core Node has
 * no mmap; a read() loop stalls a cgroup 1.5-3 % where page faults on a
 * file-backed map stall it 10-34 % (DESIGN.md, "Kernel and Redis facts").
 * native/pagetoucher.py speaks the same protocol as a slower fallback.
 *
 * PROTOCOL (line based; stdout is flushed after every line)
 *
 *   pagetoucher anon   --size SIZE [--hold-ms MS] [--max-lifetime-ms MS]
 *   pagetoucher thrash --file PATH --size SIZE [--hold-ms MS] [--order random|seq]
 *                      [--advice normal|random] [--seed N] [--max-lifetime-ms MS]
 *   pagetoucher serve  --file PATH --size SIZE [--advice normal|random] [--seed N]
 *                      [--max-lifetime-ms MS]
 *
 *   SIZE  bytes, or with a K/M/G/T suffix (powers of 1024; "M", "MiB", "MB").
 *   MS    whole milliseconds. --hold-ms defaults to 0, --order to random,
 *         --advice to normal, --seed to a time-based value (echoed in hello),
 *         --max-lifetime-ms to 3600000: a forgotten hog is the next person's
 *         incident, so there is always a cap, counted from start.
 *
 *   anon    mmap(MAP_PRIVATE|MAP_ANONYMOUS), write one byte per page in order,
 *           then hold. Without swap, in a tight cgroup, the OOM killer SIGKILLs
 *           it: that is the expected outcome, the caller sees signal SIGKILL.
 *   thrash  create PATH fresh (O_EXCL), fill it with write() from this
 *           process (file pages are charged to the cgroup that first faults
 *           them in), mmap(MAP_SHARED, PROT_READ), then read one byte per page,
 *           pass after pass, until the hold expires. Random order reshuffles
 *           every pass.
 *   --advice random sets MADV_RANDOM (no read-around on a fault). It is not
 *           the default because, measured in a 128M v1 cgroup with a 256M
 *           file, it cuts the memory stall from ~18 % to ~2 %: each fault
 *           then waits on a 4 KiB read (I/O, which PSI memory does not count)
 *           instead of pulling in read_ahead_kb and reclaiming as much.
 *   serve   create and fill PATH as thrash does, map it, print `ready`, then
 *           answer stdin commands, one reply line per command, in order:
 *             pass | pass seq   -> touch every page once in order -> done <us>
 *             pass random       -> same, shuffled                 -> done <us>
 *             quit              -> exit 0 (EOF on stdin does the same)
 *             anything else     -> err <reason>
 *
 *   stdout lines
 *     hello impl=c mode=M pid=N page=B size=B [order=O] [advice=A] [seed=N]
 *                         always first
 *                         (impl=python-fallback from pagetoucher.py)
 *     touched <bytes>     filling progress, about every 100 ms
 *     packed <bytes>      anon/thrash: every page touched; the hold starts
 *     ready <bytes>       serve: filled and mapped; send commands
 *     pass <n> <us>       thrash: n passes done, the last took us µs
 *                         (one per finished pass, at most one per 100 ms)
 *     reads <pages> <us>  thrash: pages read and µs since packed, about
 *                         once a second (a random pass can take minutes)
 *     done <us>           serve: reply to pass
 *     err <reason>        serve: reply to an unknown command
 *     exit <reason>       last line, after the file is unlinked:
 *                         hold | quit | eof | max-lifetime |
 *                         signal SIGTERM|SIGINT|SIGHUP
 *   stderr: `error: ...` lines only.
 *
 *   exit status: 0 finished (hold, quit, eof, max-lifetime); 1 failed (mmap,
 *   write, stdout closed); 2 bad arguments; 3 refused (PATH exists, its
 *   directory is tmpfs/ramfs, or not enough free space); 128+N after signal N
 *   (SIGTERM/SIGINT/SIGHUP: the file is unlinked first). PATH is unlinked on
 *   every exit except SIGKILL, where the caller unlinks it.
 *
 *   Refused filesystems: on tmpfs/ramfs the pages are shmem, not reclaimable
 *   without swap: an OOM, not thrash.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_REFUSED 3
#define DEFAULT_MAX_LIFETIME_MS 3600000ULL
/* drill's longest duration; a lifetime is a hold plus a self-exit grace, so it gets a day more */
#define MAX_HOLD_MS (7ULL * 24 * 3600 * 1000)
#define MAX_LIFETIME_MS (8ULL * 24 * 3600 * 1000)
#define PROGRESS_US 100000ULL
#define CHECK_EVERY_PAGES 256u
#define FILL_CHUNK (1u << 20)
#define WRITEBACK_CHUNK (8u << 20)
/* Room left on the filesystem after the file: filling a disk is not a drill. */
#define FREE_SPACE_MARGIN (64ULL << 20)

enum mode { MODE_ANON, MODE_THRASH, MODE_SERVE };
enum order { ORDER_RANDOM, ORDER_SEQ };
enum advice { ADVICE_NORMAL, ADVICE_RANDOM };

struct options {
	enum mode mode;
	const char *file;
	uint64_t size;
	uint64_t hold_ms;
	uint64_t max_lifetime_ms;
	enum order order;
	enum advice advice;
	uint64_t seed;
	int have_size, have_hold, have_lifetime, have_order, have_advice, have_seed;
};

static volatile sig_atomic_t g_signal;
static int g_stdout_gone;
static uint64_t g_deadline_us; /* max lifetime, monotonic µs */
static const char *g_created_path;
static size_t g_page;

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void on_signal(int sig)
{
	g_signal = sig;
}

/* One protocol line; a failed write means the reader is gone: stop. */
static void say(const char *fmt, ...)
{
	va_list ap;
	if (g_stdout_gone)
		return;
	va_start(ap, fmt);
	int n = vprintf(fmt, ap);
	va_end(ap);
	if (n < 0 || putchar('\n') == EOF || fflush(stdout) == EOF)
		g_stdout_gone = 1;
}

static void fail_msg(const char *fmt, ...)
{
	va_list ap;
	fputs("error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A closed pipe shows as POLLERR on our end before we next write to it. */
static void check_stdout(void)
{
	struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
		g_stdout_gone = 1;
}

enum stop { RUN = 0, STOP_SIGNAL, STOP_STDOUT, STOP_LIFETIME };

static enum stop should_stop(void)
{
	if (g_signal)
		return STOP_SIGNAL;
	if (g_stdout_gone)
		return STOP_STDOUT;
	if (now_us() >= g_deadline_us)
		return STOP_LIFETIME;
	return RUN;
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGTERM: return "SIGTERM";
	case SIGINT: return "SIGINT";
	case SIGHUP: return "SIGHUP";
	default: return "signal";
	}
}

static void cleanup_file(void)
{
	if (g_created_path && unlink(g_created_path) != 0 && errno != ENOENT)
		fail_msg("cannot unlink %s: %s", g_created_path, strerror(errno));
	g_created_path = NULL;
}

/* Ends the run for a stop reason: the last line, the file gone, the status. */
static int finish(enum stop why)
{
	cleanup_file(); /* before the exit line: a reader of "exit" may rely on it */
	switch (why) {
	case STOP_SIGNAL:
		say("exit signal %s", signal_name(g_signal));
		return 128 + g_signal;
	case STOP_STDOUT:
		return EXIT_FAILED;
	case STOP_LIFETIME:
		say("exit max-lifetime");
		return 0;
	case RUN:
		break;
	}
	return 0;
}

/* The normal end of thrash and serve: file gone, then the last line. */
static int finish_ok(const char *reason)
{
	cleanup_file();
	say("exit %s", reason);
	return g_stdout_gone ? EXIT_FAILED : 0;
}

/* ---- arguments ---- */

static int parse_u64(const char *text, uint64_t *out)
{
	if (!text || !*text)
		return -1;
	uint64_t v = 0;
	for (const char *p = text; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int parse_size(const char *text, uint64_t *out)
{
	size_t len = strlen(text), digits = 0;
	while (digits < len && text[digits] >= '0' && text[digits] <= '9')
		digits++;
	if (digits == 0 || digits > 20)
		return -1;
	char num[21];
	memcpy(num, text, digits);
	num[digits] = '\0';
	uint64_t v;
	if (parse_u64(num, &v) != 0)
		return -1;
	const char *unit = text + digits;
	unsigned shift;
	switch (unit[0]) {
	case '\0': shift = 0; break;
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	default: return -1;
	}
	if (shift && unit[1] && strcmp(unit + 1, "B") && strcmp(unit + 1, "iB"))
		return -1;
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = v << shift;
	return 0;
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nusage: pagetoucher anon --size SIZE [--hold-ms MS] [--max-lifetime-ms MS]\n"
	      "       pagetoucher thrash --file PATH --size SIZE [--hold-ms MS] [--order random|seq] [--advice normal|random]\n"
	      "                          [--seed N] [--max-lifetime-ms MS]\n"
	      "       pagetoucher serve --file PATH --size SIZE [--advice normal|random] [--seed N] [--max-lifetime-ms MS]\n",
	      stderr);
	return EXIT_USAGE;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof(*o));
	if (argc < 2)
		return usage_error("missing mode (anon, thrash or serve)");
	if (!strcmp(argv[1], "anon"))
		o->mode = MODE_ANON;
	else if (!strcmp(argv[1], "thrash"))
		o->mode = MODE_THRASH;
	else if (!strcmp(argv[1], "serve"))
		o->mode = MODE_SERVE;
	else
		return usage_error("unknown mode \"%s\" (anon, thrash or serve)", argv[1]);

	for (int i = 2; i < argc; i += 2) {
		const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
		if (!value)
			return usage_error("%s needs a value", flag);
		if (!strcmp(flag, "--size")) {
			if (o->have_size++)
				return usage_error("--size given twice");
			if (parse_size(value, &o->size) != 0 || o->size == 0)
				return usage_error("--size: \"%s\" is not a size (bytes, or e.g. 256M, 1G)", value);
		} else if (!strcmp(flag, "--hold-ms")) {
			if (o->have_hold++)
				return usage_error("--hold-ms given twice");
			if (o->mode == MODE_SERVE)
				return usage_error("--hold-ms is not valid for serve (it runs until quit or EOF)");
			if (parse_u64(value, &o->hold_ms) != 0 || o->hold_ms > MAX_HOLD_MS)
				return usage_error("--hold-ms: \"%s\" is not whole milliseconds up to 7 days", value);
		} else if (!strcmp(flag, "--max-lifetime-ms")) {
			if (o->have_lifetime++)
				return usage_error("--max-lifetime-ms given twice");
			if (parse_u64(value, &o->max_lifetime_ms) != 0 || o->max_lifetime_ms == 0 || o->max_lifetime_ms > MAX_LIFETIME_MS)
				return usage_error("--max-lifetime-ms: \"%s\" is not whole milliseconds from 1 to 8 days", value);
		} else if (!strcmp(flag, "--file")) {
			if (o->file)
				return usage_error("--file given twice");
			if (o->mode == MODE_ANON)
				return usage_error("--file is not valid for anon (it maps anonymous memory)");
			if (!*value)
				return usage_error("--file is empty");
			o->file = value;
		} else if (!strcmp(flag, "--order")) {
			if (o->have_order++)
				return usage_error("--order given twice");
			if (o->mode != MODE_THRASH)
				return usage_error("--order is only valid for thrash (serve takes it per pass command)");
			if (!strcmp(value, "random"))
				o->order = ORDER_RANDOM;
			else if (!strcmp(value, "seq"))
				o->order = ORDER_SEQ;
			else
				return usage_error("--order: \"%s\" is not random or seq", value);
		} else if (!strcmp(flag, "--advice")) {
			if (o->have_advice++)
				return usage_error("--advice given twice");
			if (o->mode == MODE_ANON)
				return usage_error("--advice is not valid for anon");
			if (!strcmp(value, "normal"))
				o->advice = ADVICE_NORMAL;
			else if (!strcmp(value, "random"))
				o->advice = ADVICE_RANDOM;
			else
				return usage_error("--advice: \"%s\" is not normal or random", value);
		} else if (!strcmp(flag, "--seed")) {
			if (o->have_seed++)
				return usage_error("--seed given twice");
			if (o->mode == MODE_ANON)
				return usage_error("--seed is not valid for anon");
			if (parse_u64(value, &o->seed) != 0)
				return usage_error("--seed: \"%s\" is not a whole number", value);
		} else {
			return usage_error("unknown flag \"%s\"", flag);
		}
	}
	if (!o->have_size)
		return usage_error("--size is required");
	if (o->mode != MODE_ANON && !o->file)
		return usage_error("--file is required for %s", argv[1]);
	if (!o->have_lifetime)
		o->max_lifetime_ms = DEFAULT_MAX_LIFETIME_MS;
	if (!o->have_seed)
		o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (o->size > (uint64_t)SIZE_MAX / 2 || (o->size + g_page - 1) / g_page > UINT32_MAX)
		return usage_error("--size is too large");
	return 0;
}

/* ---- page order ---- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void shuffle(uint32_t *perm, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(splitmix64(rng) % i);
		uint32_t t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
}

/*
 * Reads one byte of every page; returns RUN when the pass completed. The
 * volatile sink keeps the compiler from dropping the loads.
 */
static volatile unsigned char g_sink;

/* thrash's `reads` lines; zero report interval (serve) prints none. */
struct reads_report {
	uint64_t pages, since_us, last_us, every_us;
};

static enum stop touch_pass(const unsigned char *map, uint32_t pages, const uint32_t *perm, uint64_t until_us,
			    struct reads_report *rr)
{
	unsigned char acc = 0;
	for (uint32_t i = 0; i < pages; i++) {
		uint32_t page = perm ? perm[i] : i;
		acc ^= map[(size_t)page * g_page];
		if ((i % CHECK_EVERY_PAGES) == CHECK_EVERY_PAGES - 1) {
			if (rr) {
				rr->pages += CHECK_EVERY_PAGES;
				uint64_t t = now_us();
				if (t - rr->last_us >= rr->every_us) {
					say("reads %" PRIu64 " %" PRIu64, rr->pages, t - rr->since_us);
					rr->last_us = t;
				}
			}
			check_stdout();
			enum stop why = should_stop();
			if (why)
				return why;
			if (until_us && now_us() >= until_us)
				break;
		}
	}
	g_sink = acc;
	return RUN;
}

/* ---- file ---- */

static int check_directory(const char *path, uint64_t size)
{
	char *copy = strdup(path);
	if (!copy) {
		fail_msg("out of memory");
		return EXIT_FAILED;
	}
	char *slash = strrchr(copy, '/');
	const char *dir = slash ? (slash == copy ? "/" : (*slash = '\0', copy)) : ".";
	struct statfs fs;
	struct statvfs vfs;
	int status = 0;
	if (statfs(dir, &fs) != 0 || statvfs(dir, &vfs) != 0) {
		fail_msg("cannot stat directory %s of %s: %s", dir, path, strerror(errno));
		status = errno == ENOENT || errno == ENOTDIR ? EXIT_REFUSED : EXIT_FAILED;
	} else if ((unsigned long)fs.f_type == TMPFS_MAGIC || (unsigned long)fs.f_type == RAMFS_MAGIC) {
		fail_msg("refusing %s: %s is %s; its pages are shmem, not reclaimable without swap "
			 "(an OOM, not thrash); use a disk filesystem such as /var/tmp",
			 path, dir, (unsigned long)fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
		status = EXIT_REFUSED;
	} else {
		uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		if (avail < size + FREE_SPACE_MARGIN) {
			fail_msg("refusing %s: %s has %" PRIu64 " MiB free, needs %" PRIu64 " MiB for the file plus %llu MiB margin",
				 path, dir, avail >> 20, (size + (1u << 20) - 1) >> 20, FREE_SPACE_MARGIN >> 20);
			status = EXIT_REFUSED;
		}
	}
	free(copy);
	return status;
}

/*
 * Writes the whole file from this process, so its page cache is charged to
 * our cgroup. Writeback is started per 8 MiB and waited for one chunk behind:
 * a v1 memory cgroup full of dirty pages can OOM instead of reclaiming.
 */
static int fill_file(int fd, const char *path, uint64_t size)
{
	static unsigned char buf[FILL_CHUNK];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131u + 7u);
	uint64_t written = 0, synced = 0, last_print = now_us();
	while (written < size) {
		size_t len = size - written < sizeof(buf) ? (size_t)(size - written) : sizeof(buf);
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR && !g_signal)
				continue;
			if (errno == EINTR)
				return -2;
			fail_msg("cannot write %s at %" PRIu64 ": %s", path, written, strerror(errno));
			return -1;
		}
		written += (uint64_t)n;
		if (written - synced >= WRITEBACK_CHUNK || written == size) {
			sync_file_range(fd, (off_t)synced, (off_t)(written - synced), SYNC_FILE_RANGE_WRITE);
			if (synced >= WRITEBACK_CHUNK)
				sync_file_range(fd, (off_t)(synced - WRITEBACK_CHUNK), WRITEBACK_CHUNK,
						SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
			synced = written;
		}
		uint64_t t = now_us();
		if (t - last_print >= PROGRESS_US) {
			say("touched %" PRIu64, written);
			last_print = t;
		}
		check_stdout();
		if (should_stop())
			return -2;
	}
	/* Clean pages before mapping: reclaim then only has to drop them. */
	if (fdatasync(fd) != 0) {
		fail_msg("cannot fdatasync %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Creates, fills and maps PATH; on failure returns the exit status. */
static int map_fresh_file(const struct options *o, unsigned char **map_out)
{
	int status = check_directory(o->file, o->size);
	if (status)
		return status;
	int fd = open(o->file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		if (errno == EEXIST) {
			fail_msg("refusing %s: it already exists (the file must be created fresh inside the cgroup; "
				 "remove a stale one first)", o->file);
			return EXIT_REFUSED;
		}
		fail_msg("cannot create %s: %s", o->file, strerror(errno));
		return EXIT_FAILED;
	}
	g_created_path = o->file;
	int filled = fill_file(fd, o->file, o->size);
	if (filled == -2) {
		close(fd);
		return -1; /* stopped: caller finishes with the stop reason */
	}
	if (filled != 0) {
		close(fd);
		return EXIT_FAILED;
	}
	void *map = mmap(NULL, (size_t)o->size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		fail_msg("cannot mmap %s (%" PRIu64 " bytes): %s", o->file, o->size, strerror(errno));
		return EXIT_FAILED;
	}
	*map_out = map;
	return 0;
}

/* ---- modes ---- */

static int run_anon(const struct options *o)
{
	unsigned char *map = mmap(NULL, (size_t)o->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED) {
		fail_msg("cannot mmap %" PRIu64 " anonymous bytes: %s", o->size, strerror(errno));
		return EXIT_FAILED;
	}
	uint64_t last_print = now_us();
	for (uint64_t off = 0, i = 0; off < o->size; off += g_page, i++) {
		map[off] = 1;
		if ((i % CHECK_EVERY_PAGES) == CHECK_EVERY_PAGES - 1) {
			uint64_t t = now_us();
			if (t - last_print >= PROGRESS_US) {
				say("touched %" PRIu64, off + g_page);
				last_print = t;
			}
			check_stdout();
			enum stop why = should_stop();
			if (why)
				return finish(why);
		}
	}
	say("packed %" PRIu64, o->size);
	uint64_t hold_until = now_us() + o->hold_ms * 1000;
	for (;;) {
		check_stdout();
		enum stop why = should_stop();
		if (why)
			return finish(why);
		uint64_t t = now_us();
		if (t >= hold_until)
			break;
		uint64_t wait = hold_until - t < PROGRESS_US ? hold_until - t : PROGRESS_US;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)(wait * 1000) };
		nanosleep(&ts, NULL);
	}
	say("exit hold");
	return g_stdout_gone ? EXIT_FAILED : 0;
}

static int run_thrash(const struct options *o)
{
	unsigned char *map = NULL;
	int status = map_fresh_file(o, &map);
	if (status == -1)
		return finish(should_stop());
	if (status) {
		cleanup_file();
		return status;
	}
	uint32_t pages = (uint32_t)((o->size + g_page - 1) / g_page);
	uint32_t *perm = NULL;
	uint64_t rng = o->seed;
	if (o->order == ORDER_RANDOM) {
		perm = malloc((size_t)pages * sizeof(*perm));
		if (!perm) {
			fail_msg("cannot allocate the page order for %" PRIu32 " pages", pages);
			cleanup_file();
			return EXIT_FAILED;
		}
		for (uint32_t i = 0; i < pages; i++)
			perm[i] = i;
	}
	if (o->advice == ADVICE_RANDOM)
		madvise(map, (size_t)o->size, MADV_RANDOM);
	say("packed %" PRIu64, o->size);
	uint64_t hold_until = now_us() + o->hold_ms * 1000, last_print = 0, passes = 0;
	struct reads_report rr = { .since_us = now_us(), .last_us = now_us(), .every_us = 1000000 };
	for (;;) {
		check_stdout();
		enum stop why = should_stop();
		if (why)
			return finish(why);
		uint64_t t0 = now_us();
		if (t0 >= hold_until)
			break;
		if (perm)
			shuffle(perm, pages, &rng);
		why = touch_pass(map, pages, perm, hold_until, &rr);
		if (why)
			return finish(why);
		uint64_t t1 = now_us();
		if (t1 >= hold_until)
			break; /* cut short by the hold: not a full pass */
		passes++;
		if (t1 - last_print >= PROGRESS_US) {
			say("pass %" PRIu64 " %" PRIu64, passes, t1 - t0);
			last_print = t1;
		}
	}
	free(perm);
	munmap(map, (size_t)o->size);
	return finish_ok("hold");
}

static int serve_command(const char *line, unsigned char *map, const struct options *o, uint32_t *perm,
			 uint64_t *rng, enum stop *why, int *quit)
{
	uint32_t pages = (uint32_t)((o->size + g_page - 1) / g_page);
	int random = 0;
	if (!strcmp(line, "quit")) {
		*quit = 1;
		return 0;
	}
	if (!strcmp(line, "pass random"))
		random = 1;
	else if (strcmp(line, "pass") && strcmp(line, "pass seq")) {
		say("err unknown command (pass, pass seq, pass random, quit)");
		return 0;
	}
	if (random)
		shuffle(perm, pages, rng);
	uint64_t t0 = now_us();
	*why = touch_pass(map, pages, random ? perm : NULL, 0, NULL);
	if (*why == RUN)
		say("done %" PRIu64, now_us() - t0);
	return 0;
}

static int run_serve(const struct options *o)
{
	unsigned char *map = NULL;
	int status = map_fresh_file(o, &map);
	if (status == -1)
		return finish(should_stop());
	if (status) {
		cleanup_file();
		return status;
	}
	uint32_t pages = (uint32_t)((o->size + g_page - 1) / g_page);
	uint32_t *perm = malloc((size_t)pages * sizeof(*perm));
	if (!perm) {
		fail_msg("cannot allocate the page order for %" PRIu32 " pages", pages);
		cleanup_file();
		return EXIT_FAILED;
	}
	for (uint32_t i = 0; i < pages; i++)
		perm[i] = i;
	uint64_t rng = o->seed;
	if (o->advice == ADVICE_RANDOM)
		madvise(map, (size_t)o->size, MADV_RANDOM);
	say("ready %" PRIu64, o->size);

	char line[256];
	const char *quit_reason = "eof";
	size_t used = 0;
	int overlong = 0;
	for (;;) {
		check_stdout();
		enum stop why = should_stop();
		if (why)
			return finish(why);
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		int ready = poll(&p, 1, (int)(PROGRESS_US / 1000));
		if (ready <= 0)
			continue; /* timeout or EINTR: re-check stop reasons */
		char c;
		ssize_t n = read(STDIN_FILENO, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			quit_reason = "eof";
			break;
		}
		if (c != '\n') {
			if (used + 1 < sizeof(line))
				line[used++] = c;
			else
				overlong = 1;
			continue;
		}
		if (used > 0 && line[used - 1] == '\r')
			used--;
		line[used] = '\0';
		int quit = 0;
		if (overlong)
			say("err command too long");
		else
			serve_command(line, map, o, perm, &rng, &why, &quit);
		used = 0;
		overlong = 0;
		if (why)
			return finish(why);
		if (quit) {
			quit_reason = "quit";
			break;
		}
	}
	free(perm);
	munmap(map, (size_t)o->size);
	return finish_ok(quit_reason);
}

int main(int argc, char **argv)
{
	long page = sysconf(_SC_PAGESIZE);
	g_page = page > 0 ? (size_t)page : 4096;
	struct options o;
	int status = parse_args(argc, argv, &o);
	if (status)
		return status;

	/* No SA_RESTART: poll/nanosleep/write return EINTR and the loop checks the flag. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* a closed stdout shows as EPIPE: stop and unlink */

	g_deadline_us = now_us() + o.max_lifetime_ms * 1000;
	const char *mode = o.mode == MODE_ANON ? "anon" : o.mode == MODE_THRASH ? "thrash" : "serve";
	const char *advice = o.advice == ADVICE_RANDOM ? "random" : "normal";
	if (o.mode == MODE_THRASH)
		say("hello impl=c mode=%s pid=%ld page=%zu size=%" PRIu64 " order=%s advice=%s seed=%" PRIu64, mode,
		    (long)getpid(), g_page, o.size, o.order == ORDER_RANDOM ? "random" : "seq", advice, o.seed);
	else if (o.mode == MODE_SERVE)
		say("hello impl=c mode=%s pid=%ld page=%zu size=%" PRIu64 " advice=%s seed=%" PRIu64, mode,
		    (long)getpid(), g_page, o.size, advice, o.seed);
	else
		say("hello impl=c mode=%s pid=%ld page=%zu size=%" PRIu64, mode, (long)getpid(), g_page, o.size);

	switch (o.mode) {
	case MODE_ANON: return run_anon(&o);
	case MODE_THRASH: return run_thrash(&o);
	case MODE_SERVE: return run_serve(&o);
	}
	return EXIT_FAILED;
}
